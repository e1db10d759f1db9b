"""DeepSpeed ZeRO checkpoint directories read as one checkpoint of fp32 master weights
(docs/deepspeed.md). DeepSpeed is not installed: the directories are built here with torch.save
as DeepSpeed's engine writes them and as its zero_to_fp32 reads them (stage 1/2: each param
group's flat fp32 buffer padded to a multiple of 2 * world size and cut into equal rank
partitions; stage 3: each param cut into ceil(numel / world) pieces, the last padded). The
ZeroStageEnum and loss scaler are stand-ins under DeepSpeed's module names, so the pickles hold
what DeepSpeed's do (Python >= 3.11: getattr(ZeroStageEnum, 'gradients')). Every consolidated
tensor must equal the saved fp32 master bit for bit."""
import collections
import enum
import glob
import math
import os
import sys
import types

import pytest
import torch

import safetensors_spec
from conftest import run_tool
from hostile import peak_rss

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
PYDIR = os.path.join(BUILD, "python")


def stand_in(module, name, obj):
    """Registers obj as module.name, so pickle names it as DeepSpeed's own."""
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        m = ".".join(parts[:i])
        if m not in sys.modules:
            sys.modules[m] = types.ModuleType(m)
    setattr(sys.modules[module], name, obj)
    obj.__module__ = module
    obj.__qualname__ = name
    return obj


class ZeroStageEnum(int, enum.Enum):
    disabled = 0
    optimizer_states = 1
    gradients = 2
    weights = 3


class LossScaler:
    def __init__(self, scale):
        self.cur_scale = scale


stand_in("deepspeed.runtime.zero.config", "ZeroStageEnum", ZeroStageEnum)
stand_in("deepspeed.runtime.fp16.loss_scaler", "LossScaler", LossScaler)


def model_groups():
    torch.manual_seed(0)
    g0 = collections.OrderedDict([("embed.weight", torch.randn(7, 5)), ("layer.weight", torch.randn(3, 7)),
                                  ("layer.bias", torch.randn(3))])
    g1 = collections.OrderedDict([("norm.weight", torch.randn(11)), ("head.scale", torch.randn(()))])
    return [g0, g1]


def model_states(groups, world, buffers, shared=(), tied_in_module=()):
    module = collections.OrderedDict()
    for g in groups:
        for n, t in g.items():
            module[n] = t.to(torch.bfloat16)
    module.update(buffers)
    for name, source in tied_in_module:  # older DeepSpeed: ties only in the module's storages
        module[name] = module[source]
    return {"module": module, "buffer_names": list(buffers), "optimizer": None,
            "param_shapes": [collections.OrderedDict((n, t.shape) for n, t in g.items()) for g in groups],
            "frozen_param_shapes": None, "frozen_param_fragments": None, "shared_params": [list(p) for p in shared],
            "lr_scheduler": None, "global_steps": 5, "dp_world_size": world, "mp_world_size": 1,
            "ds_config": {"zero_optimization": {}}, "ds_version": "0.14.0"}


def write_zero12(root, groups, world, stage=2, bf16=False, buffers=None, shared=(), latest=True, tied_in_module=()):
    """ZeRO-1/2 as the engine writes it (bf16: DeepSpeed's bf16 optimizer, no zero_stage)."""
    buffers = buffers or {}
    tag = root / "global_step5" if latest else root
    tag.mkdir(parents=True)
    if latest:
        (root / "latest").write_text("global_step5")
    torch.save(model_states(groups, world, buffers, shared, tied_in_module), tag / "mp_rank_00_model_states.pt")
    parts = []
    for g in groups:
        flat = torch.cat([t.reshape(-1).float() for t in g.values()])
        align = 2 * world
        pad = math.ceil(flat.numel() / align) * align - flat.numel()
        flat = torch.cat([flat, torch.zeros(pad)])
        parts.append(flat.chunk(world))
    for r in range(world):
        osd = {"loss_scaler": LossScaler(1.0), "dynamic_loss_scale": False, "overflow": False,
               "base_optimizer_state": {"state": {}, "param_groups": [{"lr": 0.1}]},
               "single_partition_of_fp32_groups": [p[r].clone() for p in parts],
               "partition_count": [world] * len(groups), "ds_version": "0.14.0"}
        if not bf16:
            osd["zero_stage"] = ZeroStageEnum(stage)
        prefix = "bf16_" if bf16 else ""
        torch.save({"optimizer_state_dict": osd, "ds_config": {}, "ds_version": "0.14.0"},
                   tag / f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
    return tag


def write_zero3(root, groups, world):
    tag = root / "global_step5"
    tag.mkdir(parents=True)
    (root / "latest").write_text("global_step5\n")
    states = model_states(groups, world, {})
    for r in range(world):
        torch.save(states, tag / f"zero_pp_rank_{r}_mp_rank_00_model_states.pt")
    for r in range(world):
        flat_groups = []
        for g in groups:
            pieces = []
            for t in g.values():
                share = math.ceil(t.numel() / world)
                padded = torch.cat([t.reshape(-1).float(), torch.zeros(share * world - t.numel())])
                pieces.append(padded[r * share:(r + 1) * share])
            flat_groups.append(torch.cat(pieces))
        osd = {"zero_stage": ZeroStageEnum.weights, "loss_scaler": LossScaler(1.0), "partition_count": world,
               "fp32_flat_groups": flat_groups, "optimizer_state_dict": {"state": {}}, "ds_version": "0.14.0"}
        torch.save({"optimizer_state_dict": osd, "ds_config": {}, "ds_version": "0.14.0"},
                   tag / f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
    return tag


def expected_of(groups):
    return {n: t.float() for g in groups for n, t in g.items()}


def raw(t):
    return t.contiguous().numpy().tobytes()


def convert_and_compare(trove, d, expected, tmp_path):
    st = tmp_path / "out.safetensors"
    r = trove("convert", d, st)
    assert r.code == 0, r
    tensors, _ = safetensors_spec.read(st.read_bytes())
    assert set(tensors) == set(expected)
    for k, v in expected.items():
        dtype, shape, data = tensors[k]
        assert dtype == "F32" and list(shape) == list(v.shape), k
        assert data == raw(v), k
    pt = tmp_path / "out.pt"
    r = trove("convert", d, pt)
    assert r.code == 0, r
    got = torch.load(str(pt))
    for k, v in expected.items():
        assert torch.equal(got[k], v), k
    same = tmp_path / "same.safetensors"
    same.write_bytes(safetensors_spec.write({k: ("F32", list(v.shape), raw(v)) for k, v in expected.items()}))
    r = trove("diff", d, same)
    assert r.code == 0, r
    r = trove("verify", d)
    assert r.code == 0, r


@pytest.mark.parametrize("stage,bf16", [(1, False), (2, False), (1, True)])
def test_zero12_two_ranks_consolidate_bit_for_bit(trove, tmp_path, stage, bf16):
    groups = model_groups()
    buffers = {"norm.running_mean": torch.arange(4.0)}
    d = tmp_path / "ckpt"
    write_zero12(d, groups, 2, stage=stage, bf16=bf16, buffers=buffers, shared=[("lm_head.weight", "embed.weight")])
    expected = expected_of(groups)
    expected["norm.running_mean"] = buffers["norm.running_mean"]
    expected["lm_head.weight"] = expected["embed.weight"]
    convert_and_compare(trove, d, expected, tmp_path)
    r = trove("info", d)
    assert r.code == 0 and "deepspeed" in r.text, r


def test_ties_found_in_the_module_storages(trove, tmp_path):
    """DeepSpeed before shared_params was saved: zero_to_fp32 ties module entries by data_ptr."""
    groups = model_groups()
    d = tmp_path / "ckpt"
    write_zero12(d, groups, 2, tied_in_module=[("decoder.weight", "layer.weight")])
    expected = expected_of(groups)
    expected["decoder.weight"] = expected["layer.weight"]
    convert_and_compare(trove, d, expected, tmp_path)


@pytest.mark.parametrize("world", [2, 3])
def test_zero3_consolidates_with_tail_padding(trove, tmp_path, world):
    groups = model_groups()
    d = tmp_path / "ckpt"
    tag = write_zero3(d, groups, world)
    convert_and_compare(trove, d, expected_of(groups), tmp_path)
    # The tag directory itself reads alike.
    r = trove("cat", tag, "head.scale")
    assert r.code == 0, r


def test_python_open(tmp_path):
    if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
        pytest.skip("the Python module was not built")
    sys.path.insert(0, PYDIR)
    import trove as trove_module
    groups = model_groups()
    write_zero3(tmp_path / "ckpt", groups, 3)
    with trove_module.open(str(tmp_path / "ckpt"), framework="pt") as f:
        for k, v in expected_of(groups).items():
            assert torch.equal(f[k], v), k


def test_convert_holds_one_assembled_tensor_at_a_time(tmp_path):
    """Four 16 MiB params split over 2 ranks (ZeRO-3): converting holds about one assembled
    tensor, not the 64 MiB of the checkpoint."""
    torch.manual_seed(1)
    groups = [collections.OrderedDict((f"w{i}", torch.randn(1024, 4096)) for i in range(4))]
    d = tmp_path / "big"
    write_zero3(d, groups, 2)
    code, _, _, baseline = peak_rss("info", d)
    assert code == 0
    largest = 16 << 20
    for out in ("out.safetensors", "out.pt"):
        code, _, _, peak = peak_rss("convert", d, tmp_path / out)
        assert code == 0
        assert peak - baseline < 3 * largest, (out, peak, baseline)
    got = torch.load(str(tmp_path / "out.pt"))
    for k, v in groups[0].items():
        assert torch.equal(got[k], v), k


# Hostile and broken directories.

def refused(d, *words):
    r = run_tool("trove", "info", d, limit=True)
    assert r.code != 0, r
    for w in words:
        assert w in r.errtext, (w, r.errtext)
    return r.errtext


class Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_code_in_a_rank_file_is_refused_by_name(tmp_path):
    d = tmp_path / "ckpt"
    tag = write_zero12(d, model_groups(), 2)
    f = tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    state = torch.load(str(f), weights_only=False)
    state["optimizer_state_dict"]["loss_scaler"] = Boom()
    torch.save(state, f)
    refused(d, "posix.system", "zero_pp_rank_1_mp_rank_00_optim_states.pt")


def test_missing_rank_is_refused(tmp_path):
    d = tmp_path / "ckpt"
    tag = write_zero3(d, model_groups(), 3)
    (tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    refused(d, "rank 1", "missing")
    (tag / "zero_pp_rank_2_mp_rank_00_optim_states.pt").unlink()
    refused(d, "partition_count says 3")


def test_partition_sizes_that_disagree(tmp_path):
    d = tmp_path / "ckpt"
    tag = write_zero12(d, model_groups(), 2)
    f = tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    state = torch.load(str(f), weights_only=False)
    state["optimizer_state_dict"]["single_partition_of_fp32_groups"][0] = torch.zeros(3)
    torch.save(state, f)
    refused(d, "param group 0", "rank 1")


def test_huge_declared_shape_is_refused_before_allocation(tmp_path):
    d = tmp_path / "ckpt"
    groups = model_groups()
    tag = write_zero3(d, groups, 2)
    for f in tag.glob("*model_states.pt"):
        state = torch.load(str(f), weights_only=False)
        state["param_shapes"][0]["embed.weight"] = torch.Size([1 << 20, 1 << 20])
        torch.save(state, f)
    refused(d, "declare")
    r = run_tool("trove", "verify", d, limit=True)
    assert r.code != 0, r


@pytest.mark.parametrize("tag", ["../x", "/etc", "global_step5/../../x"])
def test_latest_outside_the_directory_is_refused(tmp_path, tag):
    d = tmp_path / "ckpt"
    write_zero12(d, model_groups(), 2)
    (tmp_path / "x").mkdir()
    (d / "latest").write_text(tag)
    text = refused(d, "latest")
    assert tag in text


def test_the_arithmetic_is_what_detection_needs(tmp_path):
    """A directory without rank files is not a DeepSpeed checkpoint."""
    d = tmp_path / "ckpt"
    tag = write_zero12(d, model_groups(), 2)
    for f in tag.glob("*optim_states.pt"):
        f.unlink()
    r = run_tool("trove", "info", d, limit=True)
    assert r.code != 0
    assert "deepspeed" not in r.text


class OtherGetattr:
    def __reduce__(self):
        return (getattr, (ZeroStageEnum, "mro"))


def test_zero_stage_enum_is_data_and_any_other_getattr_refused(trove, tmp_path):
    d = tmp_path / "ckpt"
    tag = write_zero12(d, model_groups(), 2)
    r = trove("scan", d)
    assert "critical" not in r.text, r.text  # getattr(ZeroStageEnum, 'gradients') is data
    f = tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    state = torch.load(str(f), weights_only=False)
    state["optimizer_state_dict"]["zero_stage"] = OtherGetattr()
    torch.save(state, f)
    refused(d, "builtins.getattr", "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    r = trove("scan", d)
    assert r.code != 0 and "refused global 'builtins.getattr'" in r.text, r.text


def test_tag_directory_linked_out_of_the_directory_is_refused(tmp_path):
    outside = tmp_path / "outside"
    write_zero12(outside, model_groups(), 2)
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "latest").write_text("global_step5")
    (d / "global_step5").symlink_to(outside / "global_step5")
    refused(d, "global_step5")
    r = run_tool("trove", "info", d, limit=True)
    assert "link" in r.errtext, r.errtext


def damage_rank_partitions(path):
    """Rewrites a rank's optimizer-state file with its tensor records deflated and their deflate
    streams then broken: the file still opens (its records are inflated only when read), and
    reading any of its partition bytes fails."""
    import zipfile
    with zipfile.ZipFile(path) as z:
        entries = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for info, data in entries:
            deflate = "/data/" in info.filename and len(data) > 64
            z.writestr(info.filename, data, zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)
    raw_file = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        broken = 0
        for info in z.infolist():
            if info.compress_type != zipfile.ZIP_DEFLATED:
                continue
            name_len, extra_len = int.from_bytes(raw_file[info.header_offset + 26:info.header_offset + 28], "little"), \
                int.from_bytes(raw_file[info.header_offset + 28:info.header_offset + 30], "little")
            start = info.header_offset + 30 + name_len + extra_len
            raw_file[start:start + info.compress_size] = b"\xff" * info.compress_size  # BTYPE 11: invalid
            broken += 1
    assert broken > 0
    path.write_bytes(bytes(raw_file))


def test_a_slice_reads_only_the_ranks_its_rows_lie_in(trove, tmp_path):
    """ZeRO-3 splits every param over the ranks: `cat DIR 'KEY[rows]'` reads only the rank pieces
    those rows lie in. With rank 1's partitions unreadable, rows in rank 0's piece still print,
    equal to torch's slicing; rows reaching rank 1's piece, and the whole param, fail."""
    import json
    groups = model_groups()
    d = tmp_path / "ckpt"
    tag = write_zero3(d, groups, 2)
    damage_rank_partitions(tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    embed = expected_of(groups)["embed.weight"]  # 7 x 5: rank 0 holds elements 0-17 (rows 0-2 whole)
    for item, expected in (("0:3", embed[0:3]), ("0:3:2, 1:4", embed[0:3:2, 1:4]), ("2", embed[2])):
        r = trove("cat", d, f"embed.weight[{item}]", "--json")
        assert r.code == 0, (item, r)
        assert json.loads(r.out)["data"] == expected.tolist(), item
    for key in ("embed.weight[2:5]", "embed.weight"):
        r = trove("cat", d, key)
        assert r.code != 0 and "zero_pp_rank_1" in r.errtext, (key, r)


def test_python_get_slice_reads_only_the_ranks_its_rows_lie_in(tmp_path):
    """get_slice(key)[rows] of a ZeRO-3 param reads only the rank pieces those rows lie in: rank
    1's file truncated after the open, rows of rank 0's piece equal torch's; rows reaching rank
    1's piece are an error naming its file."""
    if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
        pytest.skip("the Python module was not built")
    sys.path.insert(0, PYDIR)
    import trove as trove_module
    groups = model_groups()
    embed = expected_of(groups)["embed.weight"]  # 7 x 5: rank 0 holds elements 0-17 (rows 0-2 whole)
    for framework in ("pt", "np"):
        tag = write_zero3(tmp_path / framework, groups, 2)
        with trove_module.open(str(tmp_path / framework), framework=framework) as f:
            os.truncate(tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt", 0)
            s = f.get_slice("embed.weight")
            for index in (slice(0, 3), (slice(1, 3), slice(2, 4)), 2, -5, (slice(None, 3), -1)):
                got, want = s[index], embed[index]
                assert (torch.equal(got, want) if framework == "pt" else (got == want.numpy()).all()), index
            with pytest.raises(trove_module.Error) as e:
                s[2:5]
            assert "zero_pp_rank_1" in str(e.value) and "changed while being read" in str(e.value)
