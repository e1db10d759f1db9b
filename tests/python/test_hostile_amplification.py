"""Small files that make large outputs or large memory (docs/security.md, "The expansion rule"):
a storage shared by a hundred thousand keys, a million memo references to one tensor, and
compressed storages that inflate a thousandfold. Each command runs under the hostile bounds
with its peak resident memory measured (wait4) and, for writes, a cap on the size of any file it
writes (RLIMIT_FSIZE), so that a write beyond the rule fails the case even when trove then
reports an error.
"""
import io
import json
import os
import pickle
import struct
import zipfile
from collections import OrderedDict

import pytest
import torch

from hostile import peak_rss

MiB = 1 << 20
# Metadata commands on these files hold no tensor bytes: a few tens of MB of code and index.
METADATA_RSS_BYTES = 128 * MiB
# No case here may write a file larger than this (the rule refuses long before).
WRITE_LIMIT_BYTES = 64 * MiB


# ---- .pt files made by hand: the pickle torch.save writes, records of our choosing ----------

class _Storage:
    """A storage torch.save refers to by persistent id: ('storage', class, key, 'cpu', numel)."""

    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class _Tensor:
    """torch._utils._rebuild_tensor_v2(storage, 0, (numel,), (1,), False, OrderedDict())."""

    def __init__(self, storage):
        self.storage = storage

    def __reduce__(self):
        n = self.storage.numel
        return torch._utils._rebuild_tensor_v2, (self.storage, 0, (n,), (1,), False, OrderedDict())


class _View:
    """torch._utils._rebuild_tensor_v2 of any size and stride."""

    def __init__(self, storage, size, stride):
        self.storage, self.size, self.stride = storage, size, stride

    def __reduce__(self):
        return torch._utils._rebuild_tensor_v2, (self.storage, 0, self.size, self.stride, False, OrderedDict())


class _PerChannel:
    """torch._utils._rebuild_qtensor of a per-channel quantized view."""

    def __init__(self, storage, size, stride, scales, zero_points, axis):
        self.args = (storage, 0, size, stride, (torch.per_channel_affine, scales, zero_points, axis), False,
                     OrderedDict())

    def __reduce__(self):
        return torch._utils._rebuild_qtensor, self.args


class _TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            return ("storage", getattr(obj, "cls", torch.FloatStorage), obj.key, "cpu", obj.numel)
        return None


def write_pt(path, obj, records, method=zipfile.ZIP_DEFLATED):
    """A torch zip checkpoint of `obj` (with _Tensor leaves) whose data/<key> records are
    `records[key]` bytes of zeros, streamed into the archive compressed with `method`."""
    data = io.BytesIO()
    _TorchPickler(data, protocol=2).dump(obj)
    zeros = bytes(16 * MiB)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", data.getvalue())
        z.writestr("archive/version", "3\n")
        for key, size in records.items():
            info = zipfile.ZipInfo(f"archive/data/{key}")
            info.compress_type = method
            with z.open(info, "w", force_zip64=True) as f:
                for at in range(0, size, len(zeros)):
                    f.write(zeros[:min(len(zeros), size - at)])
    return path


def test_hand_made_pt_is_what_torch_reads(tmp_path):
    # The generator's files are real checkpoints: torch reads a small one back.
    s = _Storage("0", 4)
    path = write_pt(tmp_path / "small.pt", {"x": _Tensor(s), "y": _Tensor(s)}, {"0": 16})
    loaded = torch.load(path)
    assert torch.equal(loaded["x"], torch.zeros(4)) and loaded["x"].data_ptr() == loaded["y"].data_ptr()


def assert_nothing_written(out):
    assert not os.path.exists(out), f"{out} was left behind"
    left = [n for n in os.listdir(os.path.dirname(out)) if ".trove-tmp" in n]
    assert not left, left


# ---- a storage shared by many keys ------------------------------------------------------------

SHARED_KEYS = 100_000
SHARED_NUMEL = MiB // 4  # one 1 MiB float32 storage


@pytest.fixture(scope="module")
def shared_refs(tmp_path_factory):
    # 100,000 keys viewing one 1 MiB storage: a 1 MB file whose keys total 100 GB when each is
    # written whole, as tensordict, safetensors and .psk.d must.
    path = tmp_path_factory.mktemp("shared") / "shared.pt"
    s = _Storage("0", SHARED_NUMEL)
    return write_pt(path, {"l": [_Tensor(s)] * SHARED_KEYS}, {"0": 4 * SHARED_NUMEL})


@pytest.mark.parametrize("target", ["out.tdz", "outdir", "out.safetensors"])
def test_shared_storage_written_per_key_is_refused_before_writing(shared_refs, tmp_path, target):
    out = tmp_path / target
    extra = ["--to", "tensordict"] if target == "outdir" else []
    code, _, err, rss = peak_rss("convert", shared_refs, out, *extra, file_size_limit=WRITE_LIMIT_BYTES)
    err = err.decode()
    assert code == 2, err
    assert "kMaxExpandRatio" in err and f"{SHARED_KEYS} tensors" in err and "l/0" in err and "--allow-expand" in err, err
    assert_nothing_written(out)
    assert rss < METADATA_RSS_BYTES, rss


def test_shared_storage_to_pt_stays_shared(shared_refs, tmp_path):
    out = tmp_path / "out.pt"
    code, _, err, rss = peak_rss("convert", shared_refs, out, file_size_limit=WRITE_LIMIT_BYTES)
    assert code == 0, err
    assert out.stat().st_size < 4 * MiB
    loaded = torch.load(out)["l"]
    assert len(loaded) == SHARED_KEYS and loaded[0].data_ptr() == loaded[-1].data_ptr()


# ---- a million references to one tensor -------------------------------------------------------

MEMO_REFS = 1_000_000
# Converting to .pt holds the document (a key per reference) and the pickle it writes, never a
# copy of the tensor's call per reference: measured 172 MB for a million references.
MEMO_REFS_RSS_BYTES = 400 * MiB


@pytest.fixture(scope="module")
def memo_refs(tmp_path_factory):
    path = tmp_path_factory.mktemp("memo") / "refs.pt"
    s = _Storage("0", 1)
    return write_pt(path, {"l": [_Tensor(s)] * MEMO_REFS}, {"0": 4})


def test_million_references_convert_to_pt_streams(memo_refs, tmp_path):
    out = tmp_path / "out.pt"
    code, _, err, rss = peak_rss("convert", memo_refs, out, file_size_limit=WRITE_LIMIT_BYTES)
    assert code == 0, err
    assert rss < MEMO_REFS_RSS_BYTES, f"{rss / MiB:.0f} MiB"
    loaded = torch.load(out)["l"]
    assert len(loaded) == MEMO_REFS and loaded[0] is loaded[-1]


# ---- compressed storages that inflate a thousandfold ------------------------------------------

BOMB_RECORD_BYTES = 256 * MiB  # of zeros, deflated to 250 kB each: 1028:1


@pytest.fixture(scope="module")
def deflated_pt(tmp_path_factory):
    path = tmp_path_factory.mktemp("deflated") / "bomb.pt"
    n = BOMB_RECORD_BYTES // 4
    write_pt(path, {"x0": _Tensor(_Storage("0", n)), "x1": _Tensor(_Storage("1", n))},
             {"0": BOMB_RECORD_BYTES, "1": BOMB_RECORD_BYTES})
    assert path.stat().st_size < 2 * MiB
    return path


@pytest.fixture(scope="module")
def deflated_tdz(tmp_path_factory):
    path = tmp_path_factory.mktemp("deflated") / "bomb.tdz"
    zeros = bytes(16 * MiB)
    meta = {f"x{i}": {"device": "cpu", "shape": [BOMB_RECORD_BYTES], "dtype": "torch.uint8"} for i in range(2)}
    meta.update({"shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("meta.json", json.dumps(meta))
        for i in range(2):
            with z.open(f"x{i}.memmap", "w", force_zip64=True) as f:
                for _ in range(BOMB_RECORD_BYTES // len(zeros)):
                    f.write(zeros)
    assert path.stat().st_size < 2 * MiB
    return path


@pytest.mark.parametrize("command", [["info"], ["info", "--json"], ["verify"], ["scan"], ["stats", "--json"]])
def test_metadata_commands_never_inflate_records(deflated_pt, command):
    code, out, err, rss = peak_rss(command[0], deflated_pt, *command[1:])
    assert code in (0, 1), err
    assert rss < METADATA_RSS_BYTES, f"{command}: {rss / MiB:.0f} MiB"


@pytest.mark.parametrize("source", ["deflated_pt", "deflated_tdz"])
@pytest.mark.parametrize("target", ["out.pt", "out.tdz", "outdir", "out.safetensors"])
def test_decompression_bomb_is_refused_before_writing(request, source, target, tmp_path):
    path = request.getfixturevalue(source)
    out = tmp_path / target
    extra = ["--to", "tensordict"] if target == "outdir" else []
    code, _, err, rss = peak_rss("convert", path, out, *extra, file_size_limit=WRITE_LIMIT_BYTES)
    err = err.decode()
    assert code == 2, err
    # The entry, its ratio and the cap.
    assert "kMaxInflateRatio (256:1)" in err and "1028:1" in err and "--allow-expand" in err, err
    assert err.startswith(f"trove: error: {path}: "), err  # what the source holds: the source is named
    assert ("'data/1'" in err or "'data/0'" in err) if source == "deflated_pt" else "x1.memmap" in err or "x0.memmap" in err, err
    assert_nothing_written(out)
    assert rss < METADATA_RSS_BYTES, rss


def test_decompression_bomb_cat_raw_is_refused(deflated_pt):
    code, out, err, _ = peak_rss("cat", "--raw", deflated_pt, "x0")
    assert code == 2 and b"kMaxInflateRatio" in err and not out, err


def test_zero_buffer_beside_real_weights_converts(tmp_path):
    # Judged over the whole file: a deflated zero buffer (an optimizer moment at step 0) beside
    # weights that compress as weights do is no bomb, though the buffer alone inflates 1028:1.
    path = tmp_path / "real.tdz"
    weights = torch.randn(2 * MiB).numpy().tobytes()  # 8 MiB
    zeros = bytes(96 * MiB)
    meta = {"w": {"device": "cpu", "shape": [2 * MiB], "dtype": "torch.float32"},
            "m": {"device": "cpu", "shape": [len(zeros)], "dtype": "torch.uint8"},
            "shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("meta.json", json.dumps(meta))
        z.writestr("w.memmap", weights)
        z.writestr("m.memmap", zeros)
    out = tmp_path / "out.pt"
    code, _, err, _ = peak_rss("convert", path, out)
    assert code == 0, err
    loaded = torch.load(out)
    assert loaded["w"].numpy().tobytes() == weights and int(loaded["m"].count_nonzero()) == 0
    # Below the floor (kExpandFreeBytes) the ratio is not judged at all.
    small = tmp_path / "small.tdz"
    with zipfile.ZipFile(small, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("meta.json", json.dumps({"m": {"device": "cpu", "shape": [32 * MiB], "dtype": "torch.uint8"},
                                            "shape": [], "device": "cpu",
                                            "_type": "<class 'tensordict._td.TensorDict'>"}))
        z.writestr("m.memmap", bytes(32 * MiB))
    code, _, err, _ = peak_rss("convert", small, tmp_path / "small.pt")
    assert code == 0, err


# ---- a per-channel quantizer over a hundred million channels, stored once ---------------------

CHANNELS = 1 << 27


@pytest.fixture(scope="module")
def wide_per_channel(tmp_path_factory):
    # A qint8 view [2^27] of one stored byte (stride 0), whose scales and zero points are
    # stride-0 views of one stored float64 and one stored int64: 2^27 channels in a 1 kB file.
    path = tmp_path_factory.mktemp("quantized") / "q.pt"
    q, scale, zero = _Storage("0", 1), _Storage("1", 1), _Storage("2", 1)
    q.cls, scale.cls, zero.cls = torch.QInt8Storage, torch.DoubleStorage, torch.LongStorage
    obj = {"q": _PerChannel(q, (CHANNELS,), (0,), _View(scale, (CHANNELS,), (0,)), _View(zero, (CHANNELS,), (0,)), 0)}
    data = io.BytesIO()
    _TorchPickler(data, protocol=2).dump(obj)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", data.getvalue())
        z.writestr("archive/version", "3\n")
        z.writestr("archive/data/0", b"\x05")
        z.writestr("archive/data/1", struct.pack("<d", 0.5))
        z.writestr("archive/data/2", struct.pack("<q", 1))
    assert path.stat().st_size < 2048
    return path


@pytest.mark.parametrize("command", [["stats", "--json"], ["info", "--json"], ["cat", "q", "--dequantize"]])
def test_per_channel_table_is_the_stored_parameters(wide_per_channel, command):
    # The dequantizing read holds one scale and one zero point per stored element, not per
    # channel (2 x 2^27 doubles = 2 GiB).
    code, out, err, rss = peak_rss(command[0], wide_per_channel, *command[1:])
    assert code == 0, err
    assert rss < METADATA_RSS_BYTES, f"{command}: {rss / MiB:.0f} MiB"
    if command[0] == "stats":
        row = json.loads(out)["tensors"][0]
        assert row["count"] == CHANNELS and row["min"] == row["max"] == 2.0  # (5 - 1) * 0.5


def test_running_out_of_memory_in_a_pickle_names_the_file_and_offset(tmp_path):
    # Values take more memory than the bytes that make them: under a process memory limit, a
    # pickle of 1.5 million small tuples ends reading before kMaxPickleValues does. That is a
    # clear error saying where, not a bare "out of memory".
    import resource
    import subprocess
    from conftest import BIN_DIR
    path = write_pt(tmp_path / "tuples.pt", {"shapes": [(i,) for i in range(1_500_000)]}, {})
    limit = 400 << 20

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    p = subprocess.run([os.path.join(BIN_DIR, "trove"), "info", path], capture_output=True, text=True,
                       preexec_fn=limited, timeout=300)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(f"trove: error: {path}: archive/data.pkl @ "), p.stderr
    assert "out of memory after" in p.stderr and "kMaxPickleValues" in p.stderr, p.stderr
