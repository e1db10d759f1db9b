"""The Python module given careless arguments: every one is a trove.Error of the right class (or
works), nothing expands in memory, nothing is written on failure, and messages name Python's
arguments, never the command line's options (docs/python.md, "Errors")."""

import glob
import os
import re
import subprocess
import sys

import pytest

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PYDIR = os.path.join(BUILD, "python")
if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
    pytest.skip(f"the Python module was not built (no {PYDIR}/trove/_trove*.so)", allow_module_level=True)
sys.path.insert(0, PYDIR)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import trove  # noqa: E402
import trove.data  # noqa: E402

TIB = 1 << 40
BIN_DIR = os.environ.get("TROVE_BIN_DIR", os.path.join(BUILD, "bin"))


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """A .psk.d file of 100 samples (i, [i / 2, i / 4]), packed by presk."""
    d = tmp_path_factory.mktemp("data")
    with open(d / "s.txt", "w") as f:
        f.write("".join(f"{i} {i / 2} {i / 4}\n" for i in range(100)))
    p = subprocess.run([os.path.join(BIN_DIR, "presk"), "data", "pack", "--type", "(idx[1000][], ℝ[2])", d / "s.txt",
                        "-o", d / "s.psk.d"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return str(d / "s.psk.d")


# --- numpy views are written as torch views are ---------------------------------------------------

def test_numpy_broadcast_stays_a_view_in_pt(tmp_path):
    out = tmp_path / "b.pt"
    trove.save({"a": np.broadcast_to(np.float32(7), (TIB,))}, out)
    assert out.stat().st_size < 4096
    a = trove.load(out)["a"]
    assert a.shape == (TIB,) and a.stride() == (0,) and float(a[TIB - 1]) == 7.0


@pytest.mark.parametrize("fmt", ["safetensors", "tdz", "pskd"])
def test_numpy_broadcast_is_refused_as_torch_expand_is(tmp_path, fmt):
    out = tmp_path / f"b.{fmt}"
    with pytest.raises(trove.LimitError) as numpy_view:
        trove.save({"a": np.broadcast_to(np.float32(0), (TIB,))}, out, format=fmt)
    with pytest.raises(trove.LimitError) as torch_view:
        trove.save({"a": torch.zeros(1).expand(TIB)}, out, format=fmt)
    assert str(numpy_view.value) == str(torch_view.value)
    assert "kMaxExpandRatio" in str(numpy_view.value) and "--" not in str(numpy_view.value)
    assert "allow_expand=True writes it anyway" in str(numpy_view.value)
    assert not os.listdir(tmp_path)
    # Asked for, a small one is written whole.
    trove.save({"a": np.broadcast_to(np.float32(3), (1 << 20,))}, out, format=fmt, allow_expand=True)
    assert out.exists()


def test_numpy_views_round_trip(tmp_path):
    from numpy.lib.stride_tricks import sliding_window_view
    x = np.arange(12, dtype=">f4").reshape(3, 4)
    arrays = {
        "broadcast": np.broadcast_to(x[::-1, None, ::-2], (3, 5, 2)),  # stride 0 over a reversed, big-endian array
        "windows": sliding_window_view(np.arange(10.0), 4),            # overlapping rows
        "windows_big_endian": sliding_window_view(np.arange(10, dtype=">i4"), (3,))[::2],
        "transposed": x.T, "column": x[:, 1], "scalar": np.array(1.5), "empty": np.zeros((0, 3)),
        "empty_broadcast": np.broadcast_to(np.zeros((0,)), (5, 0)),
    }
    for fmt in ("pt", "safetensors"):
        out = tmp_path / f"v.{fmt}"
        trove.save(arrays, out)
        back = trove.load(out)
        for k, a in arrays.items():
            assert back[k].shape == a.shape, k
            assert np.array_equal(back[k].numpy(), a), k
    back = trove.load(tmp_path / "v.pt")
    assert back["broadcast"].stride()[1] == 0 and back["windows"].stride() == (1, 1)


def test_small_numpy_broadcast_is_written_whole(tmp_path):
    out = tmp_path / "s.safetensors"
    trove.save({"a": np.broadcast_to(np.float32(3), (1 << 20,))}, out)
    assert np.array_equal(trove.load(out, framework="np")["a"], np.full(1 << 20, 3, dtype=np.float32))


def test_overlapping_numpy_windows_with_negative_strides_are_refused(tmp_path):
    from numpy.lib.stride_tricks import sliding_window_view
    with pytest.raises(trove.UnsupportedError, match="np.ascontiguousarray"):
        trove.save({"w": sliding_window_view(np.arange(10.0)[::-1], 4)}, tmp_path / "w.pt")
    assert not os.listdir(tmp_path)


# --- nesting: save takes what load gives ----------------------------------------------------------

def nested(kind, levels):
    value = torch.ones(1) if kind != "frozenset" else 1
    for _ in range(levels):
        value = {"list": lambda v: [v], "dict": lambda v: {"k": v}, "tuple": lambda v: (v,),
                 "frozenset": lambda v: frozenset([v])}[kind](value)
    return value


@pytest.mark.parametrize("kind", ["list", "dict", "tuple", "frozenset"])
def test_save_takes_the_depth_load_gives(tmp_path, kind):
    trove.save(nested(kind, 2000), tmp_path / "deep.pt")
    trove.save(trove.load(tmp_path / "deep.pt"), tmp_path / "again.pt")
    assert trove.diff(tmp_path / "deep.pt", tmp_path / "again.pt").equal


@pytest.mark.parametrize("levels", [2001, 100000])
def test_save_refuses_deeper_nesting_with_limit_error(tmp_path, levels):
    with pytest.raises(trove.LimitError, match="nested deeper than 2000 levels"):
        trove.save(nested("list", levels), tmp_path / "deep.pt")
    assert not os.listdir(tmp_path)


# --- lone surrogates ------------------------------------------------------------------------------

@pytest.fixture
def surrogate_pt(tmp_path):
    path = tmp_path / "sur.pt"
    torch.save({"x\ud800": torch.ones(2), "y": {"z\udcff": torch.ones(1)}}, path)
    return path


def test_a_lone_surrogate_round_trips_as_pickle_writes_it(tmp_path, surrogate_pt):
    tree = trove.load(surrogate_pt)
    assert "x\ud800" in tree  # load keeps the file's str
    trove.save(tree, tmp_path / "out.pt")  # written back as pickle writes it (surrogatepass)
    back = torch.load(tmp_path / "out.pt", weights_only=True)
    assert list(back) == ["x\ud800", "y"] and list(back["y"]) == ["z\udcff"]
    trove.save({"a": torch.zeros(1), "note": "caf\udce9"}, tmp_path / "note.pt")
    assert torch.load(tmp_path / "note.pt", weights_only=True)["note"] == "caf\udce9"
    # A format whose names are UTF-8 text refuses it, writing nothing.
    with pytest.raises(trove.Error):
        trove.save(tree, tmp_path / "out.safetensors")
    assert not (tmp_path / "out.safetensors").exists()
    trove.convert(surrogate_pt, tmp_path / "copy.pt")  # the library copies it
    assert list(torch.load(tmp_path / "copy.pt")) == ["x\ud800", "y"]


@pytest.mark.parametrize("metadata", [{"\ud800": "x"}, {"k": "\udcff"}])
def test_metadata_with_a_lone_surrogate_is_a_usage_error(tmp_path, surrogate_pt, metadata):
    with pytest.raises(trove.UsageError, match="lone surrogate"):
        trove.save({"a": torch.zeros(1)}, tmp_path / "m.safetensors", metadata=metadata)
    with pytest.raises(trove.UsageError, match="lone surrogate"):
        trove.convert(surrogate_pt, tmp_path / "m.safetensors", metadata=metadata)
    with pytest.raises(trove.UsageError, match="dict of str to str"):
        trove.save({"a": torch.zeros(1)}, tmp_path / "m.safetensors", metadata={"k": 1})
    assert sorted(os.listdir(tmp_path)) == ["sur.pt"]


@pytest.mark.parametrize("framework", ["np", "pt"])
def test_looking_up_a_lone_surrogate_finds_no_key(surrogate_pt, framework):
    f = trove.open(surrogate_pt, framework=framework)
    for key in ("\udcff", "x\ud800"):
        assert key not in f
        for lookup in (f.__getitem__, f.get_tensor, f.get_slice, f.dequantize):
            with pytest.raises(trove.KeyNotFoundError):
                lookup(key)
    assert "x%ED%A0%80" in f and f["x%ED%A0%80"].shape == (2,)  # its name, escaped


def test_a_lone_surrogate_in_key_globs_and_renames_is_a_usage_error(tmp_path, surrogate_pt):
    with pytest.raises(trove.UsageError, match="keys holds a lone surrogate"):
        trove.stats(surrogate_pt, keys="\udcff")
    with pytest.raises(trove.UsageError, match="exclude holds a lone surrogate"):
        trove.convert(surrogate_pt, tmp_path / "o.pt", exclude=["\udcff"])
    with pytest.raises(trove.UsageError, match="rename holds a lone surrogate"):
        trove.convert(surrogate_pt, tmp_path / "o.pt", rename={"x": "\udcff"})


# --- TorchDataset epochs: 0 to 2**64 - 1, as Dataset's ---------------------------------------------

@pytest.mark.parametrize("epoch", [(1 << 63) - 1, 1 << 63, (1 << 64) - 1])
def test_torch_dataset_takes_every_epoch_dataset_takes(shard, epoch):
    want = trove.data.open(shard).batch_indices(10, seed=3, epoch=epoch)
    for ds in (trove.data.TorchDataset(shard, 10, seed=3, epoch=epoch, with_indices=True),
               trove.data.TorchDataset(shard, 10, seed=3, with_indices=True)):
        ds.set_epoch(epoch)
        assert ds.epoch == epoch
        got = [indices.numpy().astype("uint64") for indices, _ in ds]
        assert np.array_equal(np.stack(got), want)
    # resumed mid-epoch from a state
    it = iter(ds)
    next(it), next(it), next(it)
    state = ds.state_dict()
    assert (state["epoch"], state["batches"]) == (epoch, 3)
    resumed = trove.data.TorchDataset(shard, 10, seed=3, with_indices=True)
    resumed.load_state_dict(state)
    assert resumed.epoch == epoch
    assert np.array_equal(np.stack([i.numpy().astype("uint64") for i, _ in resumed]), want[3:])


def test_torch_dataset_epoch_beyond_64_bits_is_a_usage_error(shard):
    with pytest.raises(trove.UsageError, match="epoch must be an integer from 0 to 18446744073709551615"):
        trove.data.TorchDataset(shard, 10, epoch=1 << 64)
    with pytest.raises(trove.UsageError, match="epoch must be an integer from 0 to 18446744073709551615"):
        trove.data.TorchDataset(shard, 10).set_epoch(-1)


# --- TorchDataset.state_dict raises whenever it cannot know the position ---------------------------

def test_state_dict_raises_after_a_hand_built_loader_following_loader(shard):
    ds = trove.data.TorchDataset(shard, 10, seed=1)
    it = iter(ds.loader(num_workers=2))
    for _ in range(7):
        next(it)
    assert ds.state_dict()["batches"] == 7
    del it
    it = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
    next(it), next(it)
    with pytest.raises(trove.UsageError, match="cannot count"):
        ds.state_dict()
    del it
    with pytest.raises(trove.UsageError, match="cannot count"):
        ds.state_dict()
    # known again: counted by loader(), by iterating directly, or loaded
    it = iter(ds.loader(num_workers=2))
    next(it), next(it), next(it)
    assert ds.state_dict()["batches"] == 3
    del it
    for _ in zip(range(2), torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)):
        pass
    with pytest.raises(trove.UsageError, match="cannot count"):
        ds.state_dict()
    it = iter(ds)
    next(it)
    assert ds.state_dict()["batches"] == 1
    state = ds.state_dict()
    for _ in zip(range(2), torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)):
        pass
    ds.load_state_dict(state)
    assert ds.state_dict() == state


def test_state_dict_of_persistent_loader_workers_stays_counted(shard):
    ds = trove.data.TorchDataset(shard, 10, seed=1)
    loader = ds.loader(num_workers=2, persistent_workers=True)
    for epoch in range(2):
        ds.set_epoch(epoch)
        it = iter(loader)
        next(it), next(it)
        assert ds.state_dict()["epoch"] == epoch and ds.state_dict()["batches"] == 2
        del it


# --- tensors save cannot write: refused before anything is copied ----------------------------------

@pytest.mark.parametrize("make, what", [
    (lambda: torch.empty(10, device="meta"), "meta tensor"),
    (lambda: torch.empty(TIB, device="meta"), "meta tensor"),  # nothing allocated for its 4 TiB
    (lambda: torch.eye(3).to_sparse_csr(), "dense tensors only (not torch.sparse_csr)"),
    (lambda: torch.eye(3).to_sparse(), "dense tensors only (not torch.sparse_coo)"),
    (lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8), "dense tensors only (not quantized)"),
])
def test_tensors_save_cannot_write_are_unsupported(tmp_path, make, what):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "sparse CSR support is in beta"
        tensor = make()
    with pytest.raises(trove.UnsupportedError, match=re.escape(what)):
        trove.save({"a": tensor}, tmp_path / "x.pt")
    assert not os.listdir(tmp_path)


# --- bad arguments are UsageErrors ----------------------------------------------------------------

@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("small") / "x.safetensors"
    trove.save({"a": torch.arange(12.0).reshape(3, 4)}, path)
    return path


@pytest.mark.parametrize("framework", ["np", "pt"])
def test_keys_that_are_no_str_are_usage_errors(small, framework):
    f = trove.open(small, framework=framework)
    for key in (None, 1, b"a"):
        for lookup in (f.get_slice, f.dequantize, f.get_tensor, f.__getitem__):
            with pytest.raises(trove.UsageError, match="a tensor's key is a str"):
                lookup(key)


@pytest.mark.parametrize("framework", ["np", "pt"])
@pytest.mark.parametrize("index", [1 << 63, -(1 << 64), "a", 1.5, [[1 << 63]], (0, "x"), slice("x", None),
                                   slice(0, 2, np.array([1, 2]))])
def test_indexes_neither_library_takes_are_usage_errors(small, framework, index):
    with pytest.raises(trove.UsageError, match=r"get_slice\('a'\)"):
        trove.open(small, framework=framework).get_slice("a")[index]


@pytest.mark.parametrize("framework", ["np", "pt"])
def test_slice_bounds_past_int64_select_as_numpy_does(small, framework):
    f = trove.open(small, framework=framework)
    whole = np.arange(12.0).reshape(3, 4)
    for index in (slice(-(1 << 70), 1 << 70, 1 << 70), slice(-(1 << 70), 1 << 70), slice(1 << 62, None),
                  (Ellipsis, slice(1, 1 << 64)), (slice(None), slice(-(1 << 63), 2, np.int64(1)))):
        got = f.get_slice("a")[index]
        assert np.array_equal(np.asarray(got), whole[index]), index


def test_dequantize_takes_numpy_and_torch_dtypes(tmp_path):
    path = tmp_path / "q.pt"
    torch.save({"q": torch.quantize_per_tensor(torch.ones(2, 3), 0.5, 0, torch.qint8)}, path)
    f = trove.open(path)
    for dtype, want in ((np.float32, np.float32), (np.dtype("float16"), np.float16), (torch.float64, np.float64)):
        assert f.dequantize("q", dtype=dtype).dtype == want
    with pytest.raises(trove.UsageError, match="dtype must be a str"):
        f.dequantize("q", dtype=5)
    with pytest.raises(trove.UsageError, match="not 'int8'"):
        f.dequantize("q", dtype=np.int8)


@pytest.mark.parametrize("size", [1 << 63, 0, -1, 1.5, True, [5]])
def test_max_shard_size_out_of_range_is_a_usage_error(tmp_path, small, size):
    with pytest.raises(trove.UsageError, match="max_shard_size must be a number of bytes from 1 to 2"):
        trove.save({"a": torch.zeros(3)}, tmp_path / "sh", format="safetensors", max_shard_size=size)
    with pytest.raises(trove.UsageError, match="max_shard_size must be a number of bytes from 1 to 2"):
        trove.convert(small, tmp_path / "sh", to="safetensors", max_shard_size=size)
    assert not os.listdir(tmp_path)


def test_max_shard_size_takes_numpy_integers(tmp_path):
    trove.save({"a": torch.zeros(30), "b": torch.zeros(30)}, tmp_path / "sh", format="safetensors",
               max_shard_size=np.int64(150))
    assert "model.safetensors.index.json" in os.listdir(tmp_path / "sh")


@pytest.mark.parametrize("flag", ["drop_values", "keep_unknown", "drop_unknown", "dequantize", "dedupe_tied"])
def test_convert_flags_take_true_or_false(tmp_path, small, flag):
    for value in ("x", None, 2, 0.0):
        with pytest.raises(trove.UsageError, match=f"{flag} must be True or False"):
            trove.convert(small, tmp_path / "o.pt", **{flag: value})
    assert not os.listdir(tmp_path)
    trove.convert(small, tmp_path / "o.pt", **{flag: np.bool_(False)})


@pytest.mark.parametrize("map_location", ["gpu9", {"cpu": "gpu9"}])
def test_map_location_that_is_no_device_is_a_usage_error(small, map_location):
    with pytest.raises(trove.UsageError, match="map_location='gpu9' is not a device"):
        trove.load(small, map_location=map_location)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_map_location_without_cuda_is_a_usage_error_as_device_is(small):
    for map_location in ("cuda", "cuda:0", 0):
        with pytest.raises(trove.UsageError, match=f"map_location={map_location!r} is not available in this process"):
            trove.load(small, map_location=map_location)
    with pytest.raises(trove.UsageError, match="device='cuda' is not available in this process"):
        trove.open(small, framework="pt", device="cuda")


def test_map_location_callable_must_return_a_storage_of_the_bytes_given(small):
    with pytest.raises(trove.UsageError, match="returned a value of type int, not a storage or None"):
        trove.load(small, map_location=lambda storage, location: 5)
    with pytest.raises(trove.UsageError, match="returned a storage of 2 bytes for one of 48 bytes"):
        trove.load(small, map_location=lambda storage, location: torch.UntypedStorage(2))
    back = trove.load(small, map_location=lambda storage, location: storage)
    assert torch.equal(back["a"], torch.arange(12.0).reshape(3, 4))


# --- numpy's integers are integers ----------------------------------------------------------------

def test_numpy_integers_are_taken_where_ints_are(tmp_path, shard, small):
    ds = trove.data.open(shard)
    assert ds[np.int64(3)][0] == ds[3][0] == 3 and ds[np.uint8(3)][0] == 3 and ds[np.int64(-1)][0] == 99
    assert np.array_equal(ds.batch_indices(np.int64(5), seed=np.uint64(3), epoch=np.int32(1)),
                          ds.batch_indices(5, seed=3, epoch=1))
    assert len(trove.data.TorchDataset(shard, np.int64(10), seed=np.int64(1))) == 10
    try:
        trove.set_threads(np.int64(2))
        assert trove.get_threads() == 2
    finally:
        trove.set_threads(0)
    assert list(trove.stats(small, threads=np.int8(1))) == ["a"]
    assert trove.diff(small, small, rtol=np.float32(0.1), atol=np.float16(0)).equal


@pytest.mark.parametrize("index", [True, 1.0, "3", np.float64(3)])
def test_sample_index_that_is_no_integer_is_a_usage_error(shard, index):
    with pytest.raises(trove.UsageError, match="a sample index is an integer"):
        trove.data.open(shard)[index]


# --- messages name Python's arguments -------------------------------------------------------------

@pytest.mark.parametrize("rename, message", [
    ({"": "x"}, "rename={'': 'x'}: FROM is not empty"),
    ({"a*b*": "x"}, "rename={'a*b*': 'x'}: FROM is not empty"),
    ({"it's": "x*"}, "rename={\"it's\": 'x*'}: FROM is not empty"),
    ({"a": "q", "n/x": "q"}, "rename gives 'a' and 'n/x' the same key path 'q'"),
    ({"a": ""}, "rename makes the key path of 'a' empty"),
])
def test_rename_errors_spell_the_rename_dict(tmp_path, rename, message):
    torch.save({"a": torch.ones(1), "n": {"x": torch.ones(1)}}, tmp_path / "r.pt")
    with pytest.raises(trove.UsageError) as e:
        trove.convert(tmp_path / "r.pt", tmp_path / "out.pt", rename=rename)
    assert str(e.value).startswith(message) and "--" not in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["r.pt"]


def test_gguf_metadata_hint_is_spelled_as_the_metadata_argument():
    e = trove._in_python_terms(trove._error("usage", "values (--drop-values leaves them out; --metadata KEY=VALUE "
                                                     "writes string metadata)"))
    assert str(e) == "values (drop_values=True leaves them out; metadata={KEY: VALUE} writes string metadata)"


# --- save to a file-like object: short writes -----------------------------------------------------

class Writer:
    """A file-like object whose write() takes what `took(chunk)` says and returns `returns(chunk)`."""

    def __init__(self, took, returns=None):
        self.data = bytearray()
        self.took, self.returns = took, returns or took

    def write(self, chunk):
        self.data += bytes(chunk[:self.took(chunk)])
        return self.returns(chunk)


@pytest.mark.parametrize("writer", [
    Writer(lambda b: max(1, len(b) // 2)),                 # half of each chunk
    Writer(lambda b: 1),                                   # a byte at a time
    Writer(lambda b: len(b), lambda b: None),              # None: all taken
])
def test_short_writes_are_written_again(writer):
    tensors = {"a": torch.arange(3000.0), "b": torch.ones(7, dtype=torch.int64)}
    if writer.took(b"xx") == 1:
        tensors = {"a": torch.arange(10.0)}  # a byte a write: a small file
    trove.save(tensors, writer, format="safetensors")
    back = trove.load(bytes(writer.data))
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], tensors[k]) for k in tensors)


@pytest.mark.parametrize("writer, error, message", [
    (Writer(lambda b: 0), trove.IoError, "write() took none of"),
    (Writer(lambda b: len(b), lambda b: "all"), trove.UsageError, "write() returned 'all'"),
    (Writer(lambda b: 0, lambda b: -1), trove.UsageError, "write() returned -1"),
    (Writer(lambda b: len(b), lambda b: len(b) + 1), trove.UsageError, "write() returned"),
    (Writer(lambda b: len(b), lambda b: True), trove.UsageError, "write() returned True"),
])
def test_writes_that_make_no_progress_are_errors(writer, error, message):
    with pytest.raises(error, match=re.escape(message)) as e:
        trove.save({"a": torch.zeros(1000)}, writer, format="safetensors")
    assert "bytes written to it" in str(e.value)


def test_a_failing_write_says_how_much_the_object_holds():
    class Full:
        def __init__(self):
            self.data = bytearray()

        def write(self, chunk):
            if len(self.data) >= 1 << 20:
                raise OSError(28, "No space left on device")
            self.data += chunk
            return len(chunk)

    full = Full()
    with pytest.raises(trove.IoError, match=r"No space left on device\) with 1048576 of the \d+ bytes written"):
        trove.save({"a": torch.zeros(1 << 20)}, full, format="safetensors")


def test_saving_to_a_closed_or_read_only_object_is_an_error(tmp_path):
    import io
    closed = io.BytesIO()
    closed.close()
    with pytest.raises(trove.UsageError, match="is closed"):
        trove.save({"a": torch.zeros(1)}, closed)
    (tmp_path / "r.pt").write_bytes(b"")
    with open(tmp_path / "r.pt", "rb") as read_only:
        with pytest.raises(trove.IoError, match="write"):
            trove.save({"a": torch.zeros(1)}, read_only)
    assert (tmp_path / "r.pt").read_bytes() == b""


# --- a closed File, stats' keys -------------------------------------------------------------------

@pytest.mark.parametrize("framework", ["np", "pt"])
def test_a_closed_file_answers_nothing(small, framework):
    f = trove.open(small, framework=framework)
    assert "a" in f and f.keys() == ["a"]  # names cached while open
    f.close()
    for call in (lambda: "a" in f, lambda: 5 in f, lambda: len(f), lambda: f.keys(), lambda: f["a"],
                 lambda: f.get_slice("a"), lambda: f.dequantize("a")):
        with pytest.raises(trove.UsageError, match="the file is closed"):
            call()


@pytest.mark.parametrize("keys", ["zz", ["zz", "q*"]])
def test_stats_keys_matching_nothing_say_what_the_cli_says(tmp_path, keys):
    torch.save({"a": torch.ones(2), "b": [torch.ones(3)]}, tmp_path / "s.pt")
    cli = subprocess.run([os.path.join(BIN_DIR, "trove"), "stats", tmp_path / "s.pt"]
                         + [a for k in ([keys] if isinstance(keys, str) else keys) for a in ("--keys", k)],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode != 0 and "select none of the 2 tensors (trove info lists their keys)" in cli.stderr
    with pytest.raises(trove.UsageError) as e:
        trove.stats(tmp_path / "s.pt", keys=keys)
    assert str(e.value) == f"keys={keys!r} select none of the 2 tensors (trove info lists their keys)"
    assert list(trove.stats(tmp_path / "s.pt", keys="b/*")) == ["b/0"]
