"""The Python module given careless arguments: every one is a trove.Error of the right class (or
works), nothing expands in memory, nothing is written on failure, and messages name Python's
arguments, never the command line's options (docs/python.md, "Errors")."""

import glob
import os
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

TIB = 1 << 40


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
    assert "a .pt file keeps it a view" in str(numpy_view.value)
    assert not os.listdir(tmp_path)


def test_numpy_views_round_trip(tmp_path):
    from numpy.lib.stride_tricks import sliding_window_view
    x = np.arange(12, dtype=">f4").reshape(3, 4)
    arrays = {
        "broadcast": np.broadcast_to(x[::-1, None, ::-2], (3, 5, 2)),  # stride 0 over a reversed, big-endian array
        "windows": sliding_window_view(np.arange(10.0), 4),            # overlapping rows
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
