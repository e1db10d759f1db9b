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
import pathlib
import sys
import tempfile
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


def model_states(groups, world, buffers, shared=(), tied_in_module=(), frozen=None, module_dtype=torch.bfloat16,
                 placeholders=False):
    """The model-states file's dict. frozen: name -> (shape, the fragment this file holds);
    placeholders: ZeRO-3's 0-element stand-ins for the params in `module`."""
    module = collections.OrderedDict()
    for g in groups:
        for n, t in g.items():
            module[n] = torch.empty(0, dtype=module_dtype) if placeholders else t.to(module_dtype)
    for n, (shape, fragment) in (frozen or {}).items():
        module[n] = torch.empty(0, dtype=fragment.dtype) if placeholders else fragment
    module.update(buffers)
    for name, source in tied_in_module:  # older DeepSpeed: ties only in the module's storages
        module[name] = module[source]
    return {"module": module, "buffer_names": list(buffers), "optimizer": None,
            "param_shapes": [collections.OrderedDict((n, t.shape) for n, t in g.items()) for g in groups],
            "frozen_param_shapes": collections.OrderedDict((n, s) for n, (s, _) in frozen.items()) if frozen else None,
            "frozen_param_fragments": collections.OrderedDict((n, f) for n, (_, f) in frozen.items()) if frozen else None,
            "shared_params": [list(p) for p in shared],
            "lr_scheduler": None, "global_steps": 5, "dp_world_size": world, "mp_world_size": 1,
            "ds_config": {"zero_optimization": {}}, "ds_version": "0.14.0"}


def moments_of(groups):
    """Adam's state per param, made from the weights so each is known: exp_avg, exp_avg_sq."""
    return {"exp_avg": [collections.OrderedDict((n, t * 0.5 + 1) for n, t in g.items()) for g in groups],
            "exp_avg_sq": [collections.OrderedDict((n, t * t) for n, t in g.items()) for g in groups]}


def zero12_partitions(groups, world):
    """Each group's flat fp32 buffer padded to a multiple of 2 * world, cut into world partitions."""
    parts = []
    for g in groups:
        flat = torch.cat([t.reshape(-1).float() for t in g.values()])
        align = 2 * world
        pad = math.ceil(flat.numel() / align) * align - flat.numel()
        flat = torch.cat([flat, torch.zeros(pad)])
        parts.append((flat.chunk(world), pad))
    return parts


def write_zero12(root, groups, world, stage=2, bf16=False, buffers=None, shared=(), latest=True, tied_in_module=(),
                 frozen=None, module_dtype=torch.bfloat16, moments=None, elastic=False, tag_name="global_step5"):
    """ZeRO-1/2 as the engine writes it: the fp32 partitions saved without the alignment padding
    (on the last rank), as DeepSpeedZeroOptimizer.state_dict does; the bf16 optimizer (no
    zero_stage) keeps it. frozen: name -> whole 16-bit tensor; moments: moments_of(groups), saved
    as torch's state_dict of the flat partitions (padded), or elastic: a list per group without
    the padding."""
    buffers = buffers or {}
    tag = root / tag_name if latest else root
    tag.mkdir(parents=True)
    if latest:
        (root / "latest").write_text(tag_name)
    frozen_entries = {n: (t.shape, t) for n, t in (frozen or {}).items()}
    torch.save(model_states(groups, world, buffers, shared, tied_in_module, frozen_entries, module_dtype),
               tag / "mp_rank_00_model_states.pt")
    parts = zero12_partitions(groups, world)
    state_parts = {k: zero12_partitions(v, world) for k, v in (moments or {}).items()}
    for r in range(world):
        def lean(part, pad):
            return part[r] if bf16 or r < world - 1 else part[r][:part[r].numel() - pad]
        base = {"state": {}, "param_groups": [{"lr": 0.1}]}
        if moments:
            per_group = [dict({"step": torch.tensor(5.0)}, **{k: (lean(*v[g]) if elastic else v[g][0][r]).clone()
                                                                for k, v in state_parts.items()})
                         for g in range(len(groups))]
            base = per_group if elastic else {"state": dict(enumerate(per_group)), "param_groups": [{"lr": 0.1}]}
        osd = {"loss_scaler": LossScaler(1.0), "dynamic_loss_scale": False, "overflow": False,
               "base_optimizer_state": base,
               "single_partition_of_fp32_groups": [lean(p, pad).clone() for p, pad in parts],
               "partition_count": [world] * len(groups), "ds_version": "0.14.0"}
        if not bf16:
            osd["zero_stage"] = ZeroStageEnum(stage)
        prefix = "bf16_" if bf16 else ""
        torch.save({"optimizer_state_dict": osd, "ds_config": {}, "ds_version": "0.14.0"},
                   tag / f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
    return tag


def zero3_flat(groups, world, r):
    """Rank r's flat tensor of each group: every param's ceil(numel / world) elements, padded."""
    flat_groups = []
    for g in groups:
        pieces = []
        for t in g.values():
            share = math.ceil(t.numel() / world)
            padded = torch.cat([t.reshape(-1).float(), torch.zeros(share * world - t.numel())])
            pieces.append(padded[r * share:(r + 1) * share])
        flat_groups.append(torch.cat(pieces))
    return flat_groups


def zero3_fragment(t, world, r):
    share = math.ceil(t.numel() / world)
    padded = torch.cat([t.reshape(-1), torch.zeros(share * world - t.numel(), dtype=t.dtype)])
    return padded[r * share:(r + 1) * share].clone()


def write_zero3(root, groups, world, frozen=None, moments=None, buffers=None):
    """ZeRO-3: every rank's model states (module placeholders, its fragments of the frozen params)
    and optimizer states (its fp32 flat groups; moments: the inner optimizer's state per group)."""
    tag = root / "global_step5"
    tag.mkdir(parents=True)
    (root / "latest").write_text("global_step5\n")
    for r in range(world):
        frozen_entries = {n: (t.shape, zero3_fragment(t, world, r)) for n, t in (frozen or {}).items()}
        torch.save(model_states(groups, world, buffers or {}, frozen=frozen_entries, placeholders=True),
                   tag / f"zero_pp_rank_{r}_mp_rank_00_model_states.pt")
    for r in range(world):
        inner = {"state": {}, "param_groups": [{"lr": 0.1}]}
        if moments:
            flats = {k: zero3_flat(v, world, r) for k, v in moments.items()}
            inner["state"] = {g: dict({"step": torch.tensor(5.0)}, **{k: f[g] for k, f in flats.items()})
                              for g in range(len(groups))}
        osd = {"zero_stage": ZeroStageEnum.weights, "loss_scaler": LossScaler(1.0), "partition_count": world,
               "fp32_flat_groups": zero3_flat(groups, world, r), "optimizer_state_dict": inner, "ds_version": "0.14.0"}
        torch.save({"optimizer_state_dict": osd, "ds_config": {}, "ds_version": "0.14.0"},
                   tag / f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
    return tag


def expected_of(groups):
    return {n: t.float() for g in groups for n, t in g.items()}


def raw(t):
    return t.contiguous().numpy().tobytes()


def convert_and_compare(trove, d, expected, tmp_path):
    tmp_path = pathlib.Path(tempfile.mkdtemp(dir=tmp_path))
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
    # Only the last rank's partition may be shorter (its padding left out).
    f = tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    state = torch.load(str(f), weights_only=False)
    state["optimizer_state_dict"]["single_partition_of_fp32_groups"][0] = torch.zeros(3)
    torch.save(state, f)
    refused(d, "param group 0", "rank 1's partition holds 29 elements, rank 0's 3")


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


# Frozen parameters, the 16-bit module weights, the optimizer's moments (docs/deepspeed.md).

def frozen_tensors():
    torch.manual_seed(2)
    return collections.OrderedDict([("frozen.embed", torch.randn(5, 3).to(torch.bfloat16)),
                                    ("frozen.bias", torch.randn(7).to(torch.bfloat16))])


def convert_keys(trove, d, tmp_path, *args):
    out = tmp_path / "sel.safetensors"
    if out.exists():
        out.unlink()
    r = trove("convert", d, out, *args)
    assert r.code == 0, r
    tensors, _ = safetensors_spec.read(out.read_bytes())
    return tensors


def bf16_raw(t):
    return t.contiguous().view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else raw(t)


@pytest.mark.parametrize("stage", [1, 2])
def test_frozen_params_zero12_whole_in_rank0_model_states(trove, tmp_path, stage):
    groups, frozen = model_groups(), frozen_tensors()
    d = tmp_path / "ckpt"
    write_zero12(d, groups, 2, stage=stage, frozen=frozen)
    expected = expected_of(groups)
    expected.update(frozen)
    st = convert_keys(trove, d, tmp_path)
    assert set(st) == set(expected)
    for k, v in frozen.items():
        assert st[k][0] == "BF16" and list(st[k][1]) == list(v.shape) and st[k][2] == bf16_raw(v), k
    r = trove("info", d)
    assert "frozen_params" in r.text and "frozen.embed" in r.text, r.text


@pytest.mark.parametrize("world", [2, 3])
def test_frozen_params_zero3_joined_from_every_rank(trove, tmp_path, world):
    groups, frozen = model_groups(), frozen_tensors()
    d = tmp_path / "ckpt"
    write_zero3(d, groups, world, frozen=frozen)
    expected = expected_of(groups)
    expected.update(frozen)
    st = convert_keys(trove, d, tmp_path)
    assert set(st) == set(expected)
    for k, v in frozen.items():
        assert list(st[k][1]) == list(v.shape) and st[k][2] == bf16_raw(v), k
    r = trove("verify", d)
    assert r.code == 0, r


def test_frozen_fragment_that_leaves_a_hole_is_refused(tmp_path):
    d = tmp_path / "ckpt"
    tag = write_zero3(d, model_groups(), 2, frozen=frozen_tensors())
    f = tag / "zero_pp_rank_1_mp_rank_00_model_states.pt"
    state = torch.load(str(f), weights_only=False)
    state["frozen_param_fragments"]["frozen.bias"] = state["frozen_param_fragments"]["frozen.bias"][:2].clone()
    torch.save(state, f)
    refused(d, "frozen.bias", "rank 1's fragment holds 2 elements", "zero_pp_rank_1_mp_rank_00_model_states.pt")


def test_frozen_shape_of_2_40_elements_is_refused_before_allocation(tmp_path):
    for stage3 in (False, True):
        d = tmp_path / ("z3" if stage3 else "z2")
        tag = write_zero3(d, model_groups(), 2, frozen=frozen_tensors()) if stage3 else \
            write_zero12(d, model_groups(), 2, frozen=frozen_tensors())
        for f in tag.glob("*model_states.pt"):
            state = torch.load(str(f), weights_only=False)
            state["frozen_param_shapes"]["frozen.embed"] = torch.Size([1 << 20, 1 << 20])
            torch.save(state, f)
        refused(d, "frozen parameter 'frozen.embed'", str((1 << 40) // (2 if stage3 else 1)))


def test_frozen_and_trainable_at_once_and_missing_fragments_are_refused(tmp_path):
    d = tmp_path / "ckpt"
    tag = write_zero12(d, model_groups(), 2, frozen=frozen_tensors())
    f = tag / "mp_rank_00_model_states.pt"
    state = torch.load(str(f), weights_only=False)
    state["frozen_param_shapes"]["layer.bias"] = torch.Size([3])
    torch.save(state, f)
    refused(d, "'layer.bias' is in both param_shapes and frozen_param_shapes")
    d = tmp_path / "z3"
    tag = write_zero3(d, model_groups(), 3, frozen=frozen_tensors())
    (tag / "zero_pp_rank_2_mp_rank_00_model_states.pt").unlink()
    refused(d, "rank 2's model-states file", "frozen")


@pytest.mark.parametrize("dtype,name", [(torch.bfloat16, "BF16"), (torch.float16, "F16")])
def test_module_weights_are_opt_in_under_module(trove, tmp_path, dtype, name):
    groups, frozen = model_groups(), frozen_tensors()
    buffers = {"norm.running_mean": torch.arange(4.0)}
    d = tmp_path / "ckpt"
    write_zero12(d, groups, 2, buffers=buffers, frozen=frozen, module_dtype=dtype,
                 shared=[("lm_head.weight", "embed.weight")])
    # Not in what convert writes by default, nor in what diff compares.
    st = convert_keys(trove, d, tmp_path)
    assert not any(k.startswith("module/") for k in st), sorted(st)
    r = trove("info", d)
    assert "module/embed.weight" in r.text and "module_weights" in r.text, r.text
    st = convert_keys(trove, d, tmp_path, "--keys", "module/**", "--rename", "module/*=*")
    module = {n: t.to(dtype) for g in groups for n, t in g.items()}
    module.update(frozen)
    module.update(buffers)
    assert set(st) == set(module), sorted(st)
    for k, v in module.items():
        assert list(st[k][1]) == list(v.shape) and st[k][2] == bf16_raw(v), k
        if v.dtype == dtype:
            assert st[k][0] == name, k
    r = trove("cat", d, "module/layer.bias")
    assert r.code == 0, r


def test_zero3_module_holds_placeholders_and_says_so(trove, tmp_path):
    d = tmp_path / "ckpt"
    write_zero3(d, model_groups(), 2)
    r = trove("info", d)
    assert "placeholders" in r.text and "module/" not in r.text, r.text
    r = run_tool("trove", "convert", d, tmp_path / "m.safetensors", "--keys", "module/**", limit=True)
    assert r.code != 0 and "select none" in r.errtext, r.errtext


def expected_moments(groups, key):
    return {f"optimizer/{key}/{n}": t.float() for g in moments_of(groups)[key] for n, t in g.items()}


@pytest.mark.parametrize("layout", ["zero2", "zero2-elastic", "bf16", "zero3-2", "zero3-3"])
def test_adam_moments_are_opt_in_under_optimizer(trove, tmp_path, layout):
    groups = model_groups()
    d = tmp_path / "ckpt"
    if layout.startswith("zero3"):
        write_zero3(d, groups, int(layout[-1]), moments=moments_of(groups))
    else:
        write_zero12(d, groups, 2 if layout != "zero2-elastic" else 3, bf16=layout == "bf16",
                     moments=moments_of(groups), elastic=layout == "zero2-elastic")
    # The default output is the masters alone; diff against them is equal.
    convert_and_compare(trove, d, expected_of(groups), tmp_path)
    st = convert_keys(trove, d, tmp_path, "--keys", "optimizer/**")
    expected = expected_moments(groups, "exp_avg")
    expected.update(expected_moments(groups, "exp_avg_sq"))
    assert set(st) == set(expected), sorted(st)
    for k, v in expected.items():
        assert st[k][0] == "F32" and list(st[k][1]) == list(v.shape) and st[k][2] == raw(v), k
    r = trove("stats", d)
    assert r.code == 0 and "exp_avg" not in r.text, r.text


def test_exclude_alone_never_brings_opt_in_tensors_in(trove, tmp_path):
    """Opt-in tensors are compared and written only when --keys names them: an --exclude alone
    (which selects "everything but") leaves them out, in diff as in convert."""
    groups = model_groups()
    d = tmp_path / "ckpt"
    write_zero12(d, groups, 2, moments=moments_of(groups))
    masters = len(expected_of(groups))
    moments = len(expected_moments(groups, "exp_avg")) * 2
    r = trove("diff", d, d)
    assert r.code == 0 and f"{masters} common tensors" in r.text, r.text
    r = trove("diff", d, d, "--exclude", "no.such.key")
    assert r.code == 0 and f"{masters} common tensors" in r.text, r.text
    r = trove("diff", d, d, "--keys", "optimizer/**")
    assert r.code == 0 and f"{moments} common tensors" in r.text, r.text
    r = trove("diff", d, d, "--keys", "optimizer/**", "--exclude", "optimizer/exp_avg_sq/**")
    assert r.code == 0 and f"{moments // 2} common tensors" in r.text, r.text
    st = convert_keys(trove, d, tmp_path, "--exclude", "no.such.key")
    assert len(st) == masters and not any(k.startswith("optimizer/") for k in st), sorted(st)


def test_moments_larger_than_their_partition_are_refused(tmp_path):
    groups = model_groups()
    d = tmp_path / "ckpt"
    tag = write_zero12(d, groups, 2, moments=moments_of(groups))
    f = tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    state = torch.load(str(f), weights_only=False)
    state["optimizer_state_dict"]["base_optimizer_state"]["state"][1]["exp_avg"] = torch.zeros(100)
    torch.save(state, f)
    refused(d, "optimizer state 'exp_avg' of fp32 partition 1 holds 100 elements", "zero_pp_rank_0")


def test_python_keys_are_the_masters_and_opt_in_by_name(tmp_path):
    if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
        pytest.skip("the Python module was not built")
    sys.path.insert(0, PYDIR)
    import trove as trove_module
    groups = model_groups()
    write_zero12(tmp_path / "ckpt", groups, 2, moments=moments_of(groups))
    with trove_module.open(str(tmp_path / "ckpt"), framework="pt") as f:
        assert set(f.keys()) == set(expected_of(groups))
        assert torch.equal(f["optimizer/exp_avg/layer.bias"], groups[0]["layer.bias"] * 0.5 + 1)
        assert torch.equal(f["module/layer.bias"], groups[0]["layer.bias"].to(torch.bfloat16))


# Layouts trove does not read, and which tag is read.

@pytest.mark.parametrize("extra,words", [
    ("mp_rank_01_model_states.pt", ["tensor parallelism", "mp_rank_01_model_states.pt", "mp_rank_00"]),
    ("zero_pp_rank_0_mp_rank_01_optim_states.pt", ["tensor parallelism", "zero_pp_rank_0_mp_rank_01_optim_states.pt"]),
    ("layer_01-model_00-model_states.pt", ["pipeline", "layer_01-model_00-model_states.pt"]),
])
def test_tensor_and_pipeline_parallel_layouts_are_refused_by_name(tmp_path, extra, words):
    d = tmp_path / "ckpt"
    tag = write_zero12(d, model_groups(), 2)
    (tag / extra).write_bytes((tag / "mp_rank_00_model_states.pt").read_bytes())
    refused(d, *words)


def test_latest_chooses_the_tag_and_a_tag_directory_reads_itself(trove, tmp_path):
    d = tmp_path / "ckpt"
    old, new = model_groups(), model_groups()
    for g in new:
        for t in g.values():
            t.add_(1)
    write_zero12(d, old, 2, tag_name="global_step5")
    (d / "latest").unlink()
    write_zero12(d, new, 2, tag_name="global_step10")
    convert_and_compare(trove, d, expected_of(new), tmp_path)
    convert_and_compare(trove, d / "global_step5", expected_of(old), tmp_path)
    r = trove("info", d)
    assert "global_step10" in r.text, r.text


def test_partitions_saved_without_their_padding_or_with_it(trove, tmp_path):
    """DeepSpeedZeroOptimizer saves the last rank's partition without the alignment padding; the
    bf16 optimizer keeps it: both read alike (4 ranks: 59 elements padded to 64, partitions of 16,
    the last 11 without its padding; 12 padded to 16, partitions of 4, the last empty without it)."""
    groups = model_groups()
    for bf16 in (False, True):
        d = tmp_path / f"ckpt{bf16}"
        tag = write_zero12(d, groups, 4, bf16=bf16)
        last = torch.load(str(next(tag.glob("*zero_pp_rank_3_*"))), weights_only=False)
        sizes = [t.numel() for t in last["optimizer_state_dict"]["single_partition_of_fp32_groups"]]
        assert sizes == ([16, 4] if bf16 else [11, 0]), sizes
        convert_and_compare(trove, d, expected_of(groups), tmp_path)


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
