"""trove.open as safetensors' safe_open, trove.load/save as torch.load/torch.save (issue 29,
"Python parity"): a safe_open script ported line by line, names verbatim ("model/x"), bytes and
file-like objects, everything trove.load returns written back by trove.save, errors naming Python
arguments. Compared with the `safetensors` package when it is importable, else with the values
torch made (written to .safetensors by tests/python/safetensors_spec.py, an independent writer)."""
import argparse
import collections
import io
import os
import sys

import numpy as np
import pytest
import torch

import safetensors_spec

sys.path.insert(0, os.path.join(os.environ.get("TROVE_BUILD_DIR", "build"), "python"))
import trove  # noqa: E402

try:
    import safetensors.torch as peer  # noqa: F401
    from safetensors import safe_open
except ImportError:  # Debian has no python3-safetensors: compare with torch's own values
    peer = None
    safe_open = None

_ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.int64: "I64", torch.bfloat16: "BF16"}


def _tensors():
    g = torch.Generator().manual_seed(29)
    return {
        "model/embed.weight": torch.randn(6, 4, generator=g),
        "model/layers.0.bias": torch.randn(4, generator=g).half(),
        "lm_head.weight": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "step": torch.tensor([7], dtype=torch.int64),
    }


def _write_safetensors(path, tensors, metadata):
    if peer is not None:
        peer.save_file(tensors, str(path), metadata=metadata)
        return
    raw = {k: (_ST_DTYPES[t.dtype], tuple(t.shape), t.contiguous().view(torch.uint8).numpy().tobytes()
               if t.dim() else t.reshape(1).view(torch.uint8).numpy().tobytes()) for k, t in tensors.items()}
    path.write_bytes(safetensors_spec.write(raw, metadata))


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    assert torch.equal(a, b)


def test_a_safe_open_script_ported_line_by_line(tmp_path):
    path = tmp_path / "model.safetensors"
    made = _tensors()
    _write_safetensors(path, made, {"format": "pt", "note": "issue 29"})
    expected = {}
    if safe_open is not None:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            expected = {"metadata": f.metadata(), "keys": sorted(f.keys()),
                        "tensors": {k: f.get_tensor(k) for k in f.keys()},
                        "slice": f.get_slice("model/embed.weight")[1:5:2, -2:]}
    else:
        expected = {"metadata": {"format": "pt", "note": "issue 29"}, "keys": sorted(made), "tensors": made,
                    "slice": made["model/embed.weight"][1:5:2, -2:]}

    # The script: only `safe_open` became `trove.open`.
    with trove.open(str(path), framework="pt", device="cpu") as f:
        metadata = f.metadata()
        keys = f.keys()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        part = f.get_slice("model/embed.weight")[1:5:2, -2:]
        shape = f.get_slice("model/embed.weight").get_shape()

    assert metadata == expected["metadata"]
    assert sorted(keys) == expected["keys"]
    for k, t in expected["tensors"].items():
        _same(tensors[k], t)
    _same(part, expected["slice"])
    assert shape == [6, 4]
    # numpy too, with "numpy" spelled out as safe_open takes it, and negative steps there
    with trove.open(path, framework="numpy") as f:
        assert np.array_equal(f.get_slice("model/embed.weight")[::-1, ::2], made["model/embed.weight"].numpy()[::-1, ::2])


def test_metadata_is_none_without_a_header_metadata_and_info_describes_the_file(tmp_path):
    path = tmp_path / "bare.safetensors"
    _write_safetensors(path, {"x": torch.ones(2)}, None)
    with trove.open(path) as f:
        assert f.metadata() is None
        info = f.info()
        assert info["format"] == "safetensors" and info["tensors"][0]["key"] == "x"
    pt = tmp_path / "m.pt"
    torch.save({"x": torch.ones(1)}, pt)
    with trove.open(pt) as f:
        assert f.metadata() is None
        assert f.info()["format"] == "pt"


def test_saved_metadata_comes_back_as_safe_open_gives_it(tmp_path):
    path = tmp_path / "m.safetensors"
    trove.save({"w": torch.arange(4.0)}, path, metadata={"format": "pt", "epoch": "3"})
    with trove.open(path) as f:
        assert f.metadata() == {"format": "pt", "epoch": "3"}


def test_a_sharded_checkpoint_s_metadata_is_its_index_s(tmp_path):
    trove.save({"a": torch.ones(300), "b": torch.ones(300)}, tmp_path / "sh", format="safetensors",
               max_shard_size="1KB", metadata={"format": "pt"})
    with trove.open(tmp_path / "sh") as f:
        assert f.metadata() == {"total_size": "2400"} and f.keys() == ["a", "b"]
    with trove.open(tmp_path / "sh" / "model-00001-of-00002.safetensors") as f:
        assert f.metadata() == {"format": "pt"}


def test_device_cpu_and_an_unavailable_device(tmp_path):
    path = tmp_path / "m.safetensors"
    _write_safetensors(path, {"w": torch.arange(6.0).reshape(2, 3)}, None)
    with trove.open(path, framework="pt", device=torch.device("cpu")) as f:
        assert f.get_tensor("w").device.type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(trove.UsageError) as e:
            trove.open(path, framework="pt", device="cuda:0")
        assert "device='cuda:0'" in str(e.value) and "not available" in str(e.value), str(e.value)
    with pytest.raises(trove.UsageError) as e:
        trove.open(path, framework="np", device="cuda:0")
    assert "device='cuda:0' needs framework='pt'" in str(e.value)
    with pytest.raises(trove.UsageError) as e:
        trove.open(path, framework="pt", device="warp-drive")
    assert "device='warp-drive' is not a device" in str(e.value)
    # meta is a device torch has everywhere: tensors move there as they are read
    with trove.open(path, framework="pt", device="meta") as f:
        assert f.get_tensor("w").device.type == "meta"
        assert f.get_slice("w")[1:].shape == (1, 3) and f.get_slice("w")[1:].device.type == "meta"
        assert f.tree()["w"].device.type == "meta"


def test_framework_errors_name_the_argument(tmp_path):
    path = tmp_path / "m.safetensors"
    _write_safetensors(path, {"w": torch.ones(2)}, None)
    with pytest.raises(trove.UsageError) as e:
        trove.open(path, framework="jax")
    assert str(e.value).startswith("framework='jax' is not one of 'pt', 'np', 'numpy'"), str(e.value)


def test_a_negative_step_with_torch_is_a_clear_error(tmp_path):
    path = tmp_path / "m.safetensors"
    _write_safetensors(path, {"w": torch.arange(4.0)}, None)
    with trove.open(path, framework="pt") as f:
        with pytest.raises(trove.UsageError) as e:
            f.get_slice("w")[::-1]
        assert "get_slice('w')" in str(e.value) and "negative" in str(e.value)
        _same(f.get_slice("w")[-3:-1], torch.tensor([1.0, 2.0]))
        with pytest.raises(trove.UsageError):
            f.get_slice("w")[9]


# --- names verbatim ------------------------------------------------------------------------------

def test_names_holding_a_slash_are_verbatim_in_safetensors(tmp_path):
    path = tmp_path / "m.safetensors"
    made = {"model/x": torch.arange(3.0), "model y": torch.ones(1), "plain": torch.zeros(2)}
    _write_safetensors(path, made, None)
    with trove.open(path, framework="pt") as f:
        assert sorted(f.keys()) == sorted(made)
        assert "model/x" in f and "model y" in f
        for k, t in made.items():
            _same(f.get_tensor(k), t)
        assert {r.key for r in f.values().values()} == set(made)
    loaded = trove.load(path)
    assert sorted(loaded) == sorted(made)


def test_names_holding_a_slash_are_verbatim_in_pt_and_nested_dicts_keep_their_tree(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"model/x": torch.ones(2), "enc": {"w": torch.zeros(1), "a b": torch.ones(3)}}, path)
    with trove.open(path, framework="pt") as f:
        assert f.keys() == ["model/x", "enc/w", "enc/a b"]
        _same(f.get_tensor("model/x"), torch.ones(2))
        _same(f.get_tensor("enc/a b"), torch.ones(3))
    loaded = trove.load(path)
    assert list(loaded) == ["model/x", "enc"] and list(loaded["enc"]) == ["w", "a b"]


def test_names_that_would_collide_keep_their_escaped_key_paths(tmp_path):
    path = tmp_path / "both.pt"
    torch.save({"a/b": torch.zeros(1), "a": {"b": torch.ones(1)}}, path)
    with trove.open(path, framework="pt") as f:
        assert f.keys() == ["a%2Fb", "a/b"]
        _same(f.get_tensor("a%2Fb"), torch.zeros(1))
        _same(f.get_tensor("a/b"), torch.ones(1))


# --- bytes and file-like objects -----------------------------------------------------------------

def test_load_takes_bytes_and_file_like_objects_as_torch_load_and_safetensors_load_do(tmp_path):
    state = {"w": torch.arange(6.0).reshape(2, 3), "meta": {"epoch": 3}}
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    for source in (data, bytearray(data), memoryview(data), io.BytesIO(data)):
        got = trove.load(source)
        _same(got["w"], state["w"])
        assert got["meta"] == {"epoch": 3}
    with open(tmp_path / "m.pt", "wb") as out:
        out.write(data)
    with open(tmp_path / "m.pt", "rb") as f:
        _same(trove.load(f)["w"], state["w"])
    # safetensors.torch.load(bytes) is trove.load(bytes)
    st = tmp_path / "m.safetensors"
    _write_safetensors(st, {"model/x": torch.ones(2)}, {"format": "pt"})
    got = trove.load(st.read_bytes())
    assert list(got) == ["model/x"]
    _same(got["model/x"], torch.ones(2))
    with trove.open(io.BytesIO(st.read_bytes()), framework="pt") as f:
        assert f.metadata() == {"format": "pt"} and f.path == "<BytesIO>"


def test_content_errors_name_what_was_given(tmp_path):
    with pytest.raises(trove.Error) as e:
        trove.load(b"model.pt")
    assert "<bytes>" in str(e.value) and "/proc/" not in str(e.value) and "a path is a str" in str(e.value), str(e.value)
    with pytest.raises(trove.UsageError) as e:
        trove.load(io.StringIO("text"))
    assert "binary mode" in str(e.value)


def test_save_writes_to_file_like_objects(tmp_path):
    state = {"w": torch.arange(4.0), "n": 1}
    buf = io.BytesIO()
    trove.save(state, buf)
    buf.seek(0)
    back = torch.load(buf)
    _same(back["w"], state["w"])
    assert back["n"] == 1
    st = io.BytesIO()
    trove.save({"model/x": torch.ones(3)}, st, format="safetensors", metadata={"format": "pt"})
    with trove.open(st.getvalue(), framework="pt") as f:
        assert f.keys() == ["model/x"] and f.metadata() == {"format": "pt"}
    with open(tmp_path / "out.safetensors", "wb") as out:
        trove.save({"x": torch.ones(1)}, out)  # the format from the open file's name
    assert trove.open(tmp_path / "out.safetensors").format == "safetensors"
    # a failed save writes nothing into the object
    failed = io.BytesIO()
    with pytest.raises(trove.Error):
        trove.save({"x": object()}, failed)
    assert failed.getvalue() == b""
    with pytest.raises(trove.UsageError) as e:
        trove.save(state, io.BytesIO(), format="safetensors", max_shard_size="1KB")
    assert "max_shard_size" in str(e.value)


# --- save writes what load returns ---------------------------------------------------------------

def _checkpoint():
    weight = torch.arange(6.0).reshape(2, 3)
    model = collections.OrderedDict([("w", weight), ("w_t", weight.t())])
    return {
        "model": model,
        "args": argparse.Namespace(lr=0.1, layers=[1, 2], name="run"),
        "shape": torch.Size([2, 3]),
        "pair": (torch.ones(1), 2),
        "nested": [[torch.zeros(2)], {"k": torch.ones(1)}],
        "tags": {"a", "b"},
        "frozen": frozenset({1}),
        "np_scalar": np.float32(0.5),
        "np_int": np.int64(7),
        "counts": collections.defaultdict(list, {"x": [1]}),
        "dtype": torch.float16,
        "device": torch.device("cpu"),
        "optimizer_class": torch.optim.SGD,  # a name, never imported by trove: trove.Global
    }


def test_save_writes_everything_load_returns(tmp_path):
    made = tmp_path / "made.pt"
    torch.save(_checkpoint(), made)  # made by torch; torch.load(weights_only=False) only of it
    loaded = trove.load(made)
    assert isinstance(loaded["args"], argparse.Namespace)
    out = tmp_path / "out.pt"
    trove.save(loaded, out)
    again = trove.load(out)
    assert vars(again["args"]) == vars(loaded["args"])
    assert again["shape"] == torch.Size([2, 3]) and isinstance(again["shape"], torch.Size)
    assert again["tags"] == {"a", "b"} and again["frozen"] == frozenset({1})
    assert again["np_scalar"] == 0.5 and again["np_int"] == 7
    assert isinstance(again["counts"], collections.defaultdict) and again["counts"].default_factory is list
    assert again["counts"] == {"x": [1]}
    assert again["dtype"] is torch.float16 and again["device"] == torch.device("cpu")
    assert again["optimizer_class"] == trove.Global("torch.optim.sgd.SGD")
    _same(again["model"]["w"], loaded["model"]["w"])
    _same(again["pair"][0], torch.ones(1))
    _same(again["nested"][0][0], torch.zeros(2))
    # shared storage stays shared
    assert again["model"]["w_t"].storage().data_ptr() == again["model"]["w"].storage().data_ptr()
    # torch reads what trove wrote: the file this test made, so weights_only=False is safe here
    by_torch = torch.load(out, weights_only=False)
    assert vars(by_torch["args"]) == vars(_checkpoint()["args"])
    assert by_torch["tags"] == {"a", "b"} and by_torch["counts"]["x"] == [1]


def test_save_of_what_torch_1_13_weights_only_accepts_reads_back_there(tmp_path):
    made = tmp_path / "made.pt"
    state = {"model": collections.OrderedDict(w=torch.ones(2)), "shape": torch.Size([4]),
             "pair": (torch.zeros(1), 2), "nested": [[torch.ones(1)]], "step": np.int64(5)}
    torch.save({k: v for k, v in state.items() if k != "step"}, made)
    loaded = trove.load(made)
    loaded["step"] = state["step"]
    out = tmp_path / "out.pt"
    trove.save(loaded, out)
    back = torch.load(out, weights_only=True)
    assert back["shape"] == torch.Size([4]) and type(back["step"]) is int and back["step"] == 5 and back["pair"][1] == 2
    assert isinstance(back["model"], collections.OrderedDict)
    _same(back["nested"][0][0], torch.ones(1))


# --- errors name Python arguments ----------------------------------------------------------------

def test_errors_from_the_library_name_python_arguments(tmp_path):
    src = tmp_path / "m.pt"
    torch.save({"w": torch.ones(2), "n": 1}, src)
    with pytest.raises(trove.Error) as e:
        trove.convert(src, tmp_path / "o--drop-values.safetensors")
    # the option is named as the argument; a file name holding the option's spelling is kept
    assert "(drop_values=True leaves them out)" in str(e.value), str(e.value)
    assert "o--drop-values.safetensors" in str(e.value), str(e.value)
    with pytest.raises(trove.UsageError) as e:
        trove.convert(src, tmp_path / "o.bin", to="jax")
    assert str(e.value).startswith("to='jax' is not one of pskd, pt"), str(e.value)
    with pytest.raises(trove.UsageError) as e:
        trove.convert(src, tmp_path / "o.pt", dtype="int8")
    assert "--dtype" not in str(e.value) and "dtype" in str(e.value), str(e.value)


def test_all_is_complete():
    # every public class and function the package defines, and its submodule data
    defined = {n for n, v in vars(trove).items() if not n.startswith("_") and getattr(v, "__module__", None) == "trove"}
    assert defined - set(trove.__all__) == set(), defined - set(trove.__all__)
    assert "data" in trove.__all__ and "__version__" not in trove.__all__
