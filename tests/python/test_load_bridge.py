"""The value tree as Python gets it (issues #25 and #26): whatever a file holds, trove.load,
trove.open and trove.data raise trove.Error subclasses only (UsageError for bad arguments);
nothing a file names is looked up on a module; empty, zero-stride and oddly strided tensors load
as torch makes them; numpy's arrays, scalars and RNG states come back as torch.load gives them.
Files made here by torch 1.13 and numpy, or assembled opcode by opcode (pickles.py) where torch
writes no such file."""

import argparse
import collections
import glob
import os
import random
import subprocess
import sys
import textwrap
import warnings

import pytest

from pickles import (BUILD, EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, MARK, SETITEMS, call, dict_of, glob as g, i,
                     ordered_dict, pickle_of, s, storage, tensor_v2, torch_zip, tup)

BUILD_DIR = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PYDIR = os.path.join(BUILD_DIR, "python")
if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
    pytest.skip(f"the Python module was not built (no {PYDIR}/trove/_trove*.so)", allow_module_level=True)
sys.path.insert(0, PYDIR)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import trove  # noqa: E402
import trove.data  # noqa: E402
from stub_unpickler import assert_same, reference_load  # noqa: E402

NEWOBJ = b"\x81"


def pt(tmp_path, name, body, records=None):
    """A torch zip whose data.pkl is `body` (opcodes, without PROTO and STOP)."""
    return torch_zip(str(tmp_path / name), pickle_of(body), records)


def load_quietly(path, **kw):
    """trove.load of a file holding objects of classes trove does not know (no warning check)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", trove.UnknownObjectsWarning)
        return trove.load(path, **kw)


# --- errors a file's content causes are trove errors -------------------------------------------

def test_a_dict_key_python_cannot_hash_is_a_corrupt_error(tmp_path):
    cases = {
        "list_key.pt": dict_of([(EMPTY_LIST, i(1))]),                                     # {[]: 1}
        "dict_key.pt": dict_of([(s("a"), dict_of([(EMPTY_DICT, i(2))]))]),                # {'a': {{}: 2}}
        "tuple_of_list_key.pt": dict_of([(tup(i(1), EMPTY_LIST), i(3))]),                 # {(1, []): 3}
        "set_item.pt": b"\x8f" + MARK + EMPTY_LIST + b"\x90",                              # {[]} (protocol 4)
    }
    for name, body in cases.items():
        path = pt(tmp_path, name, body)
        for call_ in (lambda: trove.load(path), lambda: trove.open(path).values(),
                      lambda: trove.load(path, framework="np")):
            with pytest.raises(trove.CorruptError, match="unhashable type") as e:
                call_()
            assert e.value.file == path, name
    # the entry names the value's place: the dict under 'a'
    with pytest.raises(trove.CorruptError) as e:
        trove.load(str(tmp_path / "dict_key.pt"))
    assert e.value.entry == "a/dict"


def test_attributes_named_like_pythons_own_change_nothing_else(tmp_path):
    """A BUILD state naming __class__ or __dict__ goes into the instance's __dict__, as pickle
    puts it, for a dict subclass (trove.Dict), an OrderedDict and an argparse.Namespace."""
    for attribute in ("__class__", "__dict__", "x"):
        state = dict_of([(s(attribute), i(5))])
        my_dict = g("__main__", "MyD") + EMPTY_TUPLE + NEWOBJ + MARK + s("a") + i(1) + SETITEMS + state + BUILD
        namespace = g("argparse", "Namespace") + EMPTY_TUPLE + NEWOBJ + state + BUILD
        ordered = ordered_dict() + state + BUILD
        got = load_quietly(pt(tmp_path, "attrs.pt", dict_of([(s("d"), my_dict), (s("n"), namespace),
                                                              (s("o"), ordered)])))
        assert type(got["d"]) is trove.Dict and got["d"] == {"a": 1} and vars(got["d"])[attribute] == 5
        assert type(got["n"]) is argparse.Namespace and vars(got["n"]) == {attribute: 5}
        assert type(got["o"]) is collections.OrderedDict and vars(got["o"]) == {attribute: 5}


def nested_lists(depth):
    return EMPTY_LIST * depth + b"a" * (depth - 1)


def test_deep_values_are_a_limit_error_with_or_without_map_location(tmp_path):
    ok = pt(tmp_path, "deep_ok.pt", nested_lists(1500))
    deep = pt(tmp_path, "deep.pt", nested_lists(2100))
    for map_location in (None, "cpu", lambda storage, location: storage, {"cpu": "cpu"}):
        got = trove.load(ok, map_location=map_location)
        depth = 0
        while got:
            got, depth = got[0], depth + 1
        assert depth == 1499
        with pytest.raises(trove.LimitError, match="kMaxPythonDepth") as e:
            trove.load(deep, map_location=map_location)
        assert e.value.file == deep and "more" in e.value.entry
    with pytest.raises(trove.LimitError):
        trove.open(deep).values()


def test_text_that_is_not_utf8_comes_through(tmp_path):
    """A pickled str may hold lone surrogates (pickle writes them with surrogatepass); a bytes key
    is any bytes: values keep them, key paths escape them (always text), messages carry them."""
    path = str(tmp_path / "text.pt")
    torch.save({"a\udc80b": torch.ones(2), "s": "x\ud800y", b"\xff": torch.zeros(1)}, path)
    got = trove.load(path)
    assert list(got) == ["a\udc80b", "s", b"\xff"] and got["s"] == "x\ud800y"
    with trove.open(path, framework="pt") as f:
        assert f.keys() == ["a%ED%B2%80b", "b'%FF'"]
        assert torch.equal(f["a%ED%B2%80b"], torch.ones(2)) and f.values()["s"] == "x\ud800y"
        assert f.info()["tensors"][1]["key"] == "b'%FF'"
    # a global of a name with a lone surrogate, refused: its message names it
    refused = pt(tmp_path, "name.pt", b"c" + b"os\n" + "sys\udc80tem".encode("utf-8", "surrogatepass") + b"\n")
    with pytest.raises(trove.RefusedError) as e:
        trove.load(refused, strict=True)
    # The field is the file's own text; the message, what a traceback shows, is escaped by the
    # display rule (docs/security.md, "What trove prints").
    assert e.value.refused_global == "os.sys\udc80tem" and "sys\\udc80tem" in str(e.value)


def test_objects_keep_what_their_pickle_appended_and_set(tmp_path):
    """A list or dict subclass of an unknown class: its items and entries (tensors included) are
    the Object's `items` and `entries`, as the reference reads them."""
    import realfiles
    path = str(tmp_path / "parts.pt")
    torch.save({"obj": realfiles.Parts(), "shared": realfiles.Parts()}, path)
    got = load_quietly(path)
    parts = got["obj"]
    assert isinstance(parts, trove.Object) and parts.type_name == "realfiles.Box"
    assert [t.tolist() for t in parts.items] == [[4.0]]
    assert [(k, v.tolist()) for k, v in parts.entries] == [("k", [5.0])]
    assert_same(trove, got, reference_load(path))


# --- no name from a file is looked up on a module ----------------------------------------------

def test_names_from_a_file_are_never_looked_up_on_torch(tmp_path):
    """Every attribute lookup on the torch module during trove.load is recorded (the module's
    class swapped for a recording one): a file's names are matched against fixed tables, never
    looked up (torch >= 2.1 imports a submodule on a lookup)."""
    names = ["trove_probe_name", "nn", "float32", "strided", "channels_last", "cuda"]
    body = b"(" + b"".join(g("torch", n) for n in names) + b"l"
    path = pt(tmp_path, "names.pt", body)
    script = textwrap.dedent(f"""
        import sys, types
        sys.path.insert(0, {PYDIR!r})
        import torch, trove
        looked = []
        class Recording(types.ModuleType):
            def __getattribute__(self, name):
                looked.append(name)
                return super().__getattribute__(name)
        got = trove.load({path!r})  # trove's own tables are made here, before the recording
        torch.__class__ = Recording
        got = trove.load({path!r})
        torch.__class__ = types.ModuleType
        print(repr(got))
        print(sorted(set(looked)))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    values, looked = r.stdout.strip().splitlines()
    assert values == ("[Global('torch.trove_probe_name'), Global('torch.nn'), torch.float32, torch.strided, "
                      "torch.channels_last, Global('torch.cuda')]")
    for name in names:
        assert f"'{name}'" not in looked, looked


def test_devices_and_sizes_are_data_only_when_torch_has_them(tmp_path):
    def device(*args):
        return call(g("torch", "device"), *args)
    body = b"(" + device(s("cuda")) + device(s("cuda"), i(1)) + device(s("cuda:2")) + device(s("bogus")) + \
        device(s("cuda"), i(2 ** 64)) + device(s("cuda:x")) + call(g("torch", "Size"), tup(i(2), i(3))) + b"l"
    got = trove.load(pt(tmp_path, "devices.pt", body))
    assert got[:3] == [torch.device("cuda"), torch.device("cuda", 1), torch.device("cuda", 2)]
    assert [(o.type_name, o.args) for o in got[3:6]] == [("torch.device", ("bogus",)), ("torch.device", ("cuda", 2 ** 64)),
                                                          ("torch.device", ("cuda:x",))]
    assert type(got[6]) is torch.Size and got[6] == (2, 3)


# --- empty tensors, zero strides, every shape torch takes ---------------------------------------

def geometry(t):
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype


@pytest.mark.parametrize("make", [
    lambda: torch.zeros(0), lambda: torch.zeros(3, 0), lambda: torch.zeros(0, dtype=torch.bfloat16),
    lambda: torch.zeros(5)[5:], lambda: torch.zeros(2, 3)[:, 3:], lambda: torch.zeros(0, 4).t(),
    lambda: torch.zeros(3).expand(4, 3), lambda: torch.zeros(1, dtype=torch.int16).expand(2, 3, 5),
    lambda: torch.arange(10.0).as_strided((3, 3), (1, 1)), lambda: torch.arange(6.0).as_strided((2, 2), (0, 2), 1),
    lambda: torch.tensor(3.5).expand(()),
])
def test_tensors_of_every_shape_torch_saves(tmp_path, make):
    t = make()
    path = str(tmp_path / "t.pt")
    torch.save({"t": t, "u": t}, path)
    want = torch.load(path)
    got = trove.load(path)
    assert geometry(got["t"]) == geometry(want["t"]) and torch.equal(got["t"], want["t"])
    assert got["u"] is got["t"]
    with trove.open(path, raw=True) as f:
        assert f.tree()["t"].shape == tuple(want["t"].shape)


@pytest.mark.parametrize("size,stride,offset,storage_bytes", [
    ((0,), (1,), 100, 16),                       # an empty view past its storage's end
    ((3, 0), (0, 1), 2 ** 62, 16),               # ... whose offset in bytes overflows
    ((0,), (1,), 0, 0),                          # an empty storage
    ((0, 2 ** 62), (1, 1), 0, 0),                # dimensions whose product is 0 only thanks to the 0
    ((1, 2), (2 ** 62, 1), 0, 8),                # a huge stride of a dimension of size 1
    ((4, 2), (0, 1), 0, 8),                      # a zero stride
])
def test_views_torch_makes_from_hand_made_files(tmp_path, size, stride, offset, storage_bytes):
    """What torch.as_strided gives for these (torch.load's _rebuild_tensor_v2 does the same)."""
    numel = storage_bytes // 4
    body = dict_of([(s("t"), tensor_v2(storage("FloatStorage", "0", numel), offset, size, stride))])
    path = pt(tmp_path, "view.pt", body, {"0": bytes(range(storage_bytes))})
    want = torch.load(path)["t"]
    got = trove.load(path)["t"]
    assert geometry(got) == geometry(want) and torch.equal(got, want)
    if 0 not in size or np.prod([d for d in size if d], dtype=object) * 4 < 2 ** 63:
        array = trove.load(path, framework="np")["t"]
        assert array.shape == size and np.array_equal(array, want.numpy())
    else:  # numpy has no array of this shape, even an empty one
        with pytest.raises(trove.UnsupportedError, match="numpy cannot make an array of shape"):
            trove.load(path, framework="np")


def test_storages_at_misaligned_offsets_are_usable(tmp_path):
    """A legacy file puts each storage right after the previous bytes: a complex128 storage at an
    offset that is no multiple of 16 must still be usable (torch's copy of a misaligned complex128
    crashes the process), so trove copies it to aligned memory. In a subprocess: a crash is a
    failure, not the end of the run."""
    paths = []
    for pad in range(16):
        path = str(tmp_path / f"legacy{pad}.pt")
        torch.save({"pad": "x" * pad, "c": torch.arange(6.0).to(torch.complex128).reshape(2, 3)}, path,
                   _use_new_zipfile_serialization=False)
        paths.append(path)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {PYDIR!r})
        import torch, trove
        for path in {paths!r}:
            c = trove.load(path)["c"]
            assert c.data_ptr() % 16 == 0
            assert torch.equal(c.clone(), torch.arange(6.0).to(torch.complex128).reshape(2, 3))
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# --- numpy, as torch.load gives it -------------------------------------------------------------

def numpy_checkpoint():
    rng = np.random.RandomState(3)
    arrays = {
        "f32": rng.rand(2, 3).astype(np.float32), "fortran": np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)),
        "big_endian": np.arange(4, dtype=">f8"), "bool": np.array([True, False]), "zero_d": np.array(7, dtype=np.int16),
        "empty": np.zeros((0, 3), dtype=np.float32), "u32": np.array([1, 2 ** 32 - 1], dtype=np.uint32),
        "u64": np.array([2 ** 64 - 1], dtype=np.uint64), "c64": np.array([1 + 2j], dtype=np.complex64),
    }
    scalars = {"i64": np.int64(-7), "u64": np.uint64(2 ** 64 - 1), "f16": np.float16(1.5), "f32": np.float32(0.1),
               "f64": np.float64(float("nan")), "bool": np.bool_(True), "c128": np.complex128(1 - 2j),
               "nan_payload": np.frombuffer(b"\x01\x00\xc0\x7f", dtype=np.float32)[0]}
    shared = np.arange(3)
    return {"arrays": arrays, "scalars": scalars, "shared": [shared, shared], "tensor": torch.ones(2),
            "np_rng": np.random.RandomState(5).get_state(), "pcg": np.random.default_rng(5).bit_generator.state,
            "python_rng": random.Random(5).getstate(), "torch_rng": torch.random.get_rng_state()}


@pytest.mark.parametrize("protocol,zip_format", [(2, True), (2, False), (4, True), (5, False)])
def test_numpy_arrays_scalars_and_rng_states_come_back_as_torch_loads_them(tmp_path, protocol, zip_format):
    path = str(tmp_path / "np.pt")
    torch.save(numpy_checkpoint(), path, pickle_protocol=protocol, _use_new_zipfile_serialization=zip_format)
    got = trove.load(path)
    assert_same(trove, got, reference_load(path))
    assert_same(trove, got, torch.load(path))  # the file holds only numpy's, Python's and torch's data
    assert type(got["arrays"]["f32"]) is np.ndarray and type(got["scalars"]["f16"]) is np.float16
    assert got["shared"][0] is got["shared"][1]
    np.random.set_state(got["np_rng"])  # usable as the states they are
    random.Random().setstate(got["python_rng"])
    assert type(got["tensor"]) is torch.Tensor
    # framework="np": the numpy arrays as they are, the torch tensor as an array too
    arrays = trove.load(path, framework="np")
    assert arrays["arrays"]["big_endian"].dtype == got["arrays"]["big_endian"].dtype
    assert type(arrays["tensor"]) is np.ndarray


def test_a_trainer_rng_state_loads(tmp_path):
    """The Hugging Face Trainer's rng_state.pth, as its _save_rng_state writes it."""
    path = str(tmp_path / "rng_state.pth")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}, path)
    got = trove.load(path)
    assert_same(trove, got, torch.load(path))
    torch.random.set_rng_state(got["cpu"])
    np.random.set_state(got["numpy"])


# --- map_location ------------------------------------------------------------------------------

def test_map_location_places_each_storage_once_wherever_its_tensors_are(tmp_path):
    import realfiles
    path = str(tmp_path / "m.pt")
    w = torch.arange(6.0)
    config = realfiles.Config()
    config.extra = w[2:]
    torch.save({"w": w, "t": w.view(2, 3).t(), "config": config}, path)
    calls = []

    def place(storage, location):
        calls.append(location)
        return storage.clone()  # a storage of its own: the tensors must view it
    got = load_quietly(path, map_location=place)
    assert calls == ["cpu"]
    ptrs = {got["w"].storage().data_ptr(), got["t"].storage().data_ptr(), got["config"].state["extra"].storage().data_ptr()}
    assert len(ptrs) == 1
    assert torch.equal(got["t"], w.view(2, 3).t()) and torch.equal(got["config"].state["extra"], w[2:])


# --- arguments ---------------------------------------------------------------------------------

def test_bad_arguments_are_usage_errors(tmp_path):
    path = str(tmp_path / "a.pt")
    torch.save({"x": torch.ones(2)}, path)
    calls = [
        lambda: trove.load(None), lambda: trove.load(3), lambda: trove.open(path, framework=[]),
        lambda: trove.open(path).get_tensor(3), lambda: trove.verify(None), lambda: trove.scan(1.5),
        lambda: trove.stats(path, keys=[1]), lambda: trove.stats(path, threads=-1), lambda: trove.stats(path, keys=3),
        lambda: trove.diff(path, path, rtol="x"), lambda: trove.diff(path, None),
        lambda: trove.convert(path, str(tmp_path / "b.pt"), to=3), lambda: trove.convert(path, None),
        lambda: trove.convert(path, str(tmp_path / "b.pt"), keys=[None]),
        lambda: trove.save({"x": torch.ones(1)}, None), lambda: trove.save({"x": torch.ones(1)}, path, format=2),
    ]
    for bad in calls:
        with pytest.raises(trove.UsageError):
            bad()
    # a path os.fsdecode made of bytes that are not UTF-8: a path like any other
    odd = os.fsdecode(b"\xff-not-there.pt")
    with pytest.raises(trove.NotFoundError):
        trove.load(str(tmp_path / odd))


def test_bad_data_arguments_are_usage_errors(tmp_path):
    import test_data
    path = str(tmp_path / "d.psk.d")
    test_data.pack(path, "(idx[10][], ℝ[])", ["1 0.5", "2 0.25", "3 1.0"])
    ds = trove.data.open(path)
    for bad in (lambda: ds.batch_indices(2 ** 63), lambda: list(ds.batches(2 ** 64 - 1)),
                lambda: trove.data.TorchDataset(path, 2 ** 63), lambda: ds.batch_indices(1, seed=-1),
                lambda: trove.data.open([None]), lambda: ds["0"]):
        with pytest.raises(trove.UsageError):
            bad()
    with pytest.raises(trove.UsageError) as e:
        ds[3]
    assert isinstance(e.value, IndexError)  # as a sequence's index is refused
    assert [int(x) for x, _ in ds] == [1, 2, 3]  # so iterating stops there
    with pytest.raises(trove.Error) as e:
        trove.data.open(os.fsdecode(b"\xff-missing.psk.d"))
    assert not isinstance(e.value, TypeError)
