"""What torch.save writes besides dense tensors, made by Debian's torch: storages saved by
themselves, devices, dtypes, sizes and sparse COO/CSR tensors. trove lists each storage as the
1-D tensor of its elements, and `convert` to .pt writes every one back so that
`torch.load` gives torch's own objects again."""
import glob
import json
import os
import sys
import warnings

import pytest
import torch

import ptfiles

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PYDIR = os.path.join(BUILD, "python")


def objects():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 1.13: "sparse CSR support is in beta"
        csr = torch.eye(3).to_sparse_csr()
    w = torch.arange(6.0).reshape(2, 3)
    return {
        "storage": torch.arange(5, dtype=torch.float64).storage(),
        "w": w,
        "w_storage": w.storage(),  # the storage w views, saved again by itself
        "device": torch.device("cpu"),
        "dtype": torch.float16,
        "size": torch.Size([2, 3]),
        "coo": torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), (2, 2)),
        "csr": csr,
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("objects")
    obj = objects()
    return {"zip": ptfiles.save(obj, str(d / "o.pt")),
            "legacy": ptfiles.save(obj, str(d / "o-legacy.pt"), _use_new_zipfile_serialization=False),
            "obj": obj, "dir": d}


def same(a, b):
    if isinstance(a, torch.Tensor) and a.layout != torch.strided:
        return b.layout == a.layout and torch.equal(a.to_dense(), b.to_dense())
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if hasattr(a, "tolist") and not isinstance(a, (torch.Size,)):  # a storage
        return type(b).__name__ == type(a).__name__ and a.dtype == b.dtype and a.tolist() == b.tolist()
    return type(a) == type(b) and a == b


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_storages_are_listed_and_read(trove, files, layout):
    r = trove("info", files[layout], "--json")
    assert r.code == 0, r
    tensors = {t["key"]: t for t in json.loads(r.out)["tensors"]}
    assert tensors["storage"]["dtype"] == "float64" and tensors["storage"]["shape"] == [5]
    r = trove("cat", files[layout], "storage", "--json")
    assert r.code == 0 and json.loads(r.out)["data"] == [0.0, 1.0, 2.0, 3.0, 4.0], r
    assert "a storage by itself" in trove("info", files[layout]).text


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_convert_to_pt_gives_torch_its_objects_back(trove, files, layout):
    out = str(files["dir"] / f"back-{layout}.pt")
    r = trove("convert", files[layout], out)
    assert r.code == 0, r
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Our own output (torch 1.13's weights_only refuses torch.device, in torch's files too).
        back = torch.load(out)
    for key, want in files["obj"].items():
        assert same(want, back[key]), (key, want, back[key])
    # The storage saved again by itself is still the one w views.
    assert back["w_storage"].data_ptr() == back["w"].storage().data_ptr()


def test_python_load_gives_storages(files):
    if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
        pytest.skip("the Python module was not built")
    sys.path.insert(0, PYDIR)
    import trove as module
    got = module.load(files["zip"])
    assert got["storage"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0] and got["storage"].dtype == torch.float64
    assert got["device"] == torch.device("cpu") and got["size"] == torch.Size([2, 3])


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_untyped_storage_by_itself_round_trips(trove, tmp_path, layout):
    # torch 1.13 saves a storage's untyped() form with the class torch.storage.UntypedStorage in
    # its persistent id (numel in bytes); convert writes that class back, not ByteStorage, so
    # torch.load gives back what it gave for the source (torch 1.13: a uint8 TypedStorage of the
    # same bytes; torch 2: an UntypedStorage).
    import pickletools
    import zipfile
    t = torch.arange(4, dtype=torch.float32)
    src = str(tmp_path / "untyped.pt")
    torch.save({"u": t.storage().untyped()}, src, _use_new_zipfile_serialization=layout == "zip")
    out = str(tmp_path / "back.pt")
    r = trove("convert", src, out)
    assert r.code == 0, r

    def storage_classes(path):
        with zipfile.ZipFile(path) as z:
            pkl = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
        return [arg for op, arg, _ in pickletools.genops(pkl) if op.name == "GLOBAL" and "Storage" in arg]

    assert storage_classes(out) == ["torch.storage UntypedStorage"]
    back = torch.load(out)["u"]
    if layout == "zip":  # torch 1.13 cannot load its own legacy untyped storages
        assert storage_classes(src) == storage_classes(out)
        want = torch.load(src)["u"]
        assert type(back) is type(want) and back.dtype == want.dtype and back.tolist() == want.tolist()
    assert bytes(back.tolist()) == ptfiles.tensor_bytes(t)
