"""trove reads what torch writes: every key, dtype, shape and byte equals what torch reports."""
import json
import math

import pytest
import torch

import ptfiles

DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16",
               torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
               torch.uint8: "uint8", torch.bool: "bool", torch.complex64: "complex64", torch.complex128: "complex128"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pt"))
    return {name: maker(d) for name, maker in ptfiles.MAKERS.items()}


def info(trove, path):
    r = trove("info", path, "--json")
    assert r.code == 0, r
    return json.loads(r.out)


@pytest.mark.parametrize("case", list(ptfiles.MAKERS))
def test_every_tensor_matches_torch(trove, files, case):
    path, obj = files[case]
    expected = list(ptfiles.flatten(obj))
    doc = info(trove, path)
    assert [t["key"] for t in doc["tensors"]] == [k for k, _ in expected]
    for meta, (key, t) in zip(doc["tensors"], expected):
        assert meta["dtype"] == DTYPE_NAMES[t.dtype], key
        assert meta["shape"] == list(t.shape), key
        assert meta["nbytes"] == t.numel() * t.element_size(), key
        r = trove("cat", path, key, "--raw")
        assert r.code == 0, r
        assert r.out == ptfiles.tensor_bytes(t), key
    # What torch itself loads from the same file agrees too (weights_only: data only).
    loaded = torch.load(path)  # we made this file: full unpickling is safe here
    assert [k for k, _ in ptfiles.flatten(loaded)] == [k for k, _ in expected]


def test_formats_and_records(trove, files):
    assert info(trove, files["module"][0])["format"] == "pt"
    assert info(trove, files["legacy"][0])["format"] == "pt-legacy"
    doc = info(trove, files["renamed"][0])
    assert doc["properties"]["archive"] == "some other name"
    assert any(r["method"] == "deflate" for r in doc["records"])
    doc = info(trove, files["module"][0])
    assert doc["properties"]["version"] == 3
    assert doc["properties"]["archive"] == "module"
    names = [r["name"] for r in doc["records"]]
    assert names[0] == "module/data.pkl" and names[-1] == "module/version"
    assert all(r["offset"] % 64 == 0 for r in doc["records"])
    big = info(trove, files["big_endian"][0])
    assert big["properties"]["byteorder"] == "big"
    assert all(t["byte_order"] == "big" for t in big["tensors"])


def test_views_share_storage(trove, files):
    doc = info(trove, files["views"][0])
    by_key = {t["key"]: t for t in doc["tensors"]}
    storages = {by_key[k]["storage"] for k in ("base", "t", "row", "step", "part", "col")}
    assert len(storages) == 1
    assert all(by_key[k]["shared"] for k in ("base", "t", "row"))
    assert by_key["t"]["strides"] == [1, 6] and not by_key["t"]["contiguous"]
    assert by_key["part"]["storage_offset"] == 13
    assert by_key["expand"]["strides"] == [1, 0]


def test_parameters_and_requires_grad(trove, files):
    by_key = {t["key"]: t for t in info(trove, files["params"][0])["tensors"]}
    assert by_key["p"]["parameter"] and by_key["p"]["requires_grad"]
    assert by_key["g"]["requires_grad"] and not by_key["g"]["parameter"]
    assert by_key["frozen"]["parameter"] and not by_key["frozen"]["requires_grad"]


def test_non_tensor_values(trove, files):
    values = info(trove, files["optim"][0])["values"]
    assert values["epoch"] == 7
    assert values["big"] == {"$int": str(2 ** 70)}
    assert values["neg_big"] == {"$int": str(-(2 ** 65) + 3)}
    assert values["loss"] == 0.125
    assert values["name"] == "héllo wörld ✓"
    assert values["none"] is None
    assert values["flags"] == [True, False]
    assert values["shape"] == {"$tuple": [1, {"$tuple": [2, 3]}]}  # tuples are tagged (docs/json.md)
    assert values["blob"] == {"$bytes": "AAH/"}
    groups = values["optimizer"]["param_groups"]
    assert groups[0]["lr"] == 0.001 and groups[0]["betas"] == {"$tuple": [0.9, 0.999]} and groups[0]["params"] == [0, 1]


def test_cat_json_values(trove, files):
    path, obj = files["dtypes"]
    r = trove("cat", path, "special", "--json")
    assert r.code == 0, r
    j = json.loads(r.out)
    assert j["key"] == "special" and j["dtype"] == "float32" and j["shape"] == [5]
    assert j["data"][:3] == [{"$float": "nan"}, {"$float": "inf"}, {"$float": "-inf"}]
    assert j["data"][3] == 0 and math.copysign(1, j["data"][3]) == -1
    for key in ("float16", "bfloat16", "int8", "bool", "complex128", "scalar", "empty", "empty_int"):
        t = obj[key]
        j = json.loads(trove("cat", path, key, "--json").out)
        assert j["shape"] == list(t.shape)
        if t.is_complex():
            want = [{"$complex": [z.real, z.imag]} for z in t.reshape(-1).tolist()]
            got = list(j["data"]) if t.dim() == 1 else [x for row in j["data"] for x in row]
            assert got == want
        else:
            assert j["data"] == t.tolist(), key


def test_cat_views_gather(trove, files):
    path, obj = files["views"]
    for key in ("t", "step", "expand", "col"):
        j = json.loads(trove("cat", path, key, "--json").out)
        assert j["data"] == obj[key].tolist()


def test_big_endian_reads_as_values(trove, files):
    path, obj = files["big_endian"]
    for key, t in obj.items():
        r = trove("cat", path, key, "--raw")
        assert r.code == 0 and r.out == ptfiles.tensor_bytes(t), key


def test_info_is_readable_text(trove, files):
    r = trove("info", files["module"][0])
    assert r.code == 0
    text = r.text
    assert "module.pt: pt" in text and "head.weight" in text and "float32" in text
    # A pipe gets aligned columns too, with exact byte counts; --tsv the machine form.
    assert "\t" not in text
    rows = [l.split() for l in text.splitlines() if l.strip().startswith("head.weight")]
    assert rows and rows[0][1] == "float32"
    tsv = trove("info", files["module"][0], "--tsv")
    assert tsv.code == 0 and any(l.startswith("head.weight\tfloat32\t") for l in tsv.text.splitlines())
