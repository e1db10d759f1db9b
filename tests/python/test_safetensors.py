"""trove and .safetensors: reading every dtype of the specification, writing what the reference
implementation writes (byte for byte, checked against an independent writer in safetensors_spec),
and round trips with torch as the peer."""
import json
import struct

import numpy as np
import pytest
import torch

import safetensors_spec as spec

# torch 1.13's dtypes with a safetensors name.
TORCH_TO_ST = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
               torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
               torch.uint8: "U8", torch.bool: "BOOL", torch.complex64: "C64"}


def raw(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def spec_tensors(sd):
    return {k: (TORCH_TO_ST[v.dtype], tuple(v.shape), raw(v)) for k, v in sd.items()}


def sample_state_dict():
    g = torch.Generator().manual_seed(7)
    return {
        "encoder.layer.0.weight": torch.randn(4, 3, generator=g),
        "encoder.layer.0.bias": torch.randn(4, generator=g).double(),
        "half": torch.randn(5, generator=g).half(),
        "brain": torch.randn(2, 2, generator=g).bfloat16(),
        "steps": torch.arange(3, dtype=torch.int64),
        "i32": torch.tensor([-1, 2], dtype=torch.int32),
        "i16": torch.tensor([-3], dtype=torch.int16),
        "i8": torch.tensor([[-4, 5]], dtype=torch.int8),
        "u8": torch.tensor([250, 1, 2], dtype=torch.uint8),
        "mask": torch.tensor([True, False, True]),
        "z": torch.tensor([1 + 2j, -3j], dtype=torch.complex64),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
    }


def test_pt_to_safetensors_is_byte_identical_to_the_reference_layout(trove, tmp_path):
    sd = sample_state_dict()
    torch.save(sd, tmp_path / "m.pt")
    r = trove("convert", tmp_path / "m.pt", tmp_path / "m.safetensors")
    assert r.code == 0, r
    assert (tmp_path / "m.safetensors").read_bytes() == spec.write(spec_tensors(sd))


def test_round_trip_pt_safetensors_pt(trove, tmp_path):
    sd = sample_state_dict()
    torch.save(sd, tmp_path / "m.pt")
    assert trove("convert", tmp_path / "m.pt", tmp_path / "m.safetensors").code == 0
    assert trove("convert", tmp_path / "m.safetensors", tmp_path / "back.pt").code == 0
    back = torch.load(tmp_path / "back.pt")
    assert set(back) == set(sd)
    for k, v in sd.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
        assert torch.equal(back[k], v), k


def test_reads_what_the_independent_writer_made_with_metadata(trove, tmp_path):
    sd = sample_state_dict()
    path = tmp_path / "w.safetensors"
    path.write_bytes(spec.write(spec_tensors(sd), {"format": "pt", "note": "a \"quoted\" value"}))
    r = trove("info", "--json", path)
    assert r.code == 0, r
    info = json.loads(r.out)
    assert info["format"] == "safetensors"
    assert info["properties"]["metadata.format"] == "pt"
    assert info["properties"]["metadata.note"] == 'a "quoted" value'
    got = {t["key"]: t for t in info["tensors"]}
    assert got["brain"]["dtype"] == "bfloat16" and got["brain"]["shape"] == [2, 2]
    assert got["scalar"]["shape"] == []
    for k, v in sd.items():
        c = trove("cat", path, k, "--raw")
        assert c.code == 0 and c.out == raw(v), k


def test_every_dtype_of_the_specification(trove, tmp_path):
    # Each dtype with 4 elements (F4: 8 values, read as 4 float4_e2m1fn_x2 bytes).
    expected = {"BOOL": "bool", "F4": "float4_e2m1fn", "U8": "uint8", "I8": "int8", "F8_E5M2": "float8_e5m2",
                "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
                "F8_E5M2FNUZ": "float8_e5m2fnuz", "I16": "int16", "U16": "uint16", "F16": "float16",
                "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64",
                "F64": "float64", "I64": "int64", "U64": "uint64"}
    tensors = {}
    for i, d in enumerate(expected):
        shape = (2, 4) if d == "F4" else (2, 2)
        nbytes = 4 * spec.BITS[d] // 8 if d != "F4" else 4
        body = bytes((i * 16 + j) % 256 for j in range(nbytes))
        if d == "BOOL":
            body = bytes([1, 0, 0, 1])
        tensors["t_" + d.lower()] = (d, shape, body)
    path = tmp_path / "all.safetensors"
    path.write_bytes(spec.write(tensors))
    r = trove("info", "--json", path)
    assert r.code == 0, r
    got = {t["key"]: t for t in json.loads(r.out)["tensors"]}
    for d, name in expected.items():
        t = got["t_" + d.lower()]
        assert t["dtype"] == name, d
        assert t["shape"] == [2, 2], d  # F4: 4 values a row in the header, 2 bytes of two in trove
        c = trove("cat", path, "t_" + d.lower(), "--raw")
        assert c.code == 0 and c.out == tensors["t_" + d.lower()][2], d
    # Written back: the same bytes as the independent writer.
    assert trove("convert", path, tmp_path / "again.safetensors").code == 0
    assert (tmp_path / "again.safetensors").read_bytes() == path.read_bytes()


def test_six_bit_floats_are_refused_by_name(trove, tmp_path):
    path = tmp_path / "f6.safetensors"
    path.write_bytes(spec.write({"x": ("F6_E2M3", (4,), b"\0\0\0")}))
    r = trove("info", path)
    assert r.code != 0 and "tensor 'x'" in r.errtext and "F6_E2M3" in r.errtext, r


def test_values_read_match_torch(trove, tmp_path):
    sd = sample_state_dict()
    path = tmp_path / "v.safetensors"
    path.write_bytes(spec.write(spec_tensors(sd)))
    r = trove("cat", path, "encoder.layer.0.weight", "--json")
    assert r.code == 0, r
    data = json.loads(r.out)["data"]
    assert np.allclose(np.array(data, dtype=np.float32), sd["encoder.layer.0.weight"].numpy(), rtol=0, atol=0)


def test_metadata_option_and_escaped_names(trove, tmp_path):
    sd = {"a\"b": torch.ones(2), "line\nbreak": torch.zeros(1), "ünï/cödé": torch.ones(1, dtype=torch.int8),
          "ctl\x01": torch.ones(1, dtype=torch.int16)}
    torch.save(sd, tmp_path / "n.pt")
    r = trove("convert", tmp_path / "n.pt", tmp_path / "n.safetensors", "--metadata", "format=pt",
              "--metadata", "b=x=y")
    assert r.code == 0, r
    data = (tmp_path / "n.safetensors").read_bytes()
    assert data == spec.write(spec_tensors(sd), {"format": "pt", "b": "x=y"})
    tensors, metadata = spec.read(data)
    assert metadata == {"format": "pt", "b": "x=y"} and set(tensors) == set(sd)


def test_nested_keys_become_slash_joined_names(trove, tmp_path):
    sd = {"model": {"layer.0.weight": torch.ones(2, 2)}, "layers": [torch.zeros(1), torch.ones(1)]}
    torch.save(sd, tmp_path / "nested.pt")
    assert trove("convert", tmp_path / "nested.pt", tmp_path / "nested.safetensors").code == 0
    tensors, _ = spec.read((tmp_path / "nested.safetensors").read_bytes())
    assert set(tensors) == {"model/layer.0.weight", "layers/0", "layers/1"}


def test_values_other_than_tensors_are_refused_or_dropped(trove, tmp_path):
    torch.save({"w": torch.ones(2), "epoch": 3, "name": "run"}, tmp_path / "ckpt.pt")
    out = tmp_path / "c.safetensors"
    r = trove("convert", tmp_path / "ckpt.pt", out)
    assert r.code != 0 and "'epoch'" in r.errtext and "'name'" in r.errtext and "--drop-values" in r.errtext, r
    assert not out.exists()
    r = trove("convert", tmp_path / "ckpt.pt", out, "--drop-values")
    assert r.code == 0 and "dropped" in r.errtext and "'epoch'" in r.errtext, r
    tensors, _ = spec.read(out.read_bytes())
    assert set(tensors) == {"w"}


def test_shared_storage_and_views_are_written_whole(trove, tmp_path):
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    sd = {"w": base, "tied": base, "t": base.t(), "row": base[1]}
    torch.save(sd, tmp_path / "tied.pt")
    r = trove("convert", tmp_path / "tied.pt", tmp_path / "tied.safetensors")
    assert r.code == 0 and "share one storage" in r.errtext, r
    assert (tmp_path / "tied.safetensors").read_bytes() == spec.write(spec_tensors(sd))


def test_to_option_and_unwritable_dtypes(trove, tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "a.pt")
    r = trove("convert", tmp_path / "a.pt", tmp_path / "out.bin", "--to", "safetensors")
    assert r.code == 0, r
    assert spec.read((tmp_path / "out.bin").read_bytes())[0]["w"][0] == "F32"
    torch.save({"c": torch.ones(2, dtype=torch.complex128)}, tmp_path / "c.pt")
    r = trove("convert", tmp_path / "c.pt", tmp_path / "c.safetensors")
    assert r.code != 0 and "'c'" in r.errtext and "complex128" in r.errtext, r
    assert not (tmp_path / "c.safetensors").exists()


def test_detected_by_content_without_the_extension(trove, tmp_path):
    path = tmp_path / "weights.data"
    path.write_bytes(spec.write({"x": ("F32", (1,), struct.pack("<f", 1.5))}))
    r = trove("info", path)
    assert r.code == 0 and "safetensors" in r.text, r


def make_shards(tmp_path, kind):
    """Two shards and an index as the Hugging Face tools lay them out; returns the state dict."""
    sd = sample_state_dict()
    names = sorted(sd)
    parts = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(parts, 1):
        if kind == "safetensors":
            shard = f"model-{i:05d}-of-00002.safetensors"
            (tmp_path / shard).write_bytes(spec.write(spec_tensors({k: sd[k] for k in part}), {"format": "pt"}))
        else:
            shard = f"pytorch_model-{i:05d}-of-00002.bin"
            torch.save({k: sd[k] for k in part}, tmp_path / shard)
        weight_map.update({k: shard for k in part})
    index = "model.safetensors.index.json" if kind == "safetensors" else "pytorch_model.bin.index.json"
    total = sum(v.numel() * v.element_size() for v in sd.values())
    (tmp_path / index).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return sd, tmp_path / index


@pytest.mark.parametrize("kind", ["safetensors", "bin"])
def test_sharded_checkpoint_reads_as_one(trove, tmp_path, kind):
    sd, index = make_shards(tmp_path, kind)
    for where in (index, tmp_path):
        r = trove("info", "--json", where)
        assert r.code == 0, r
        info = json.loads(r.out)
        assert {t["key"] for t in info["tensors"]} == set(sd)
        assert info["properties"]["shards"] == 2 and not info["warnings"]
    assert trove("cat", tmp_path, "half", "--raw").out == raw(sd["half"])
    assert trove("verify", tmp_path).code == 0
    assert trove("convert", tmp_path, tmp_path / "whole.pt").code == 0
    back = torch.load(tmp_path / "whole.pt")
    assert set(back) == set(sd) and all(torch.equal(back[k], v) for k, v in sd.items())
    assert trove("diff", index, tmp_path / "whole.pt").code == 0


def test_sharded_index_disagreeing_with_its_shards_is_an_error(trove, tmp_path):
    sd, index = make_shards(tmp_path, "safetensors")
    data = json.loads(index.read_text())
    moved = sorted(sd)[0]
    home = data["weight_map"][moved]
    data["weight_map"][moved] = "model-00002-of-00002.safetensors"
    index.write_text(json.dumps(data))
    r = trove("verify", tmp_path)
    assert r.code != 0 and f"'{moved}'" in r.text + r.errtext, r
    data["weight_map"]["ghost"] = "model-00001-of-00002.safetensors"
    data["weight_map"][moved] = home
    index.write_text(json.dumps(data))
    r = trove("info", index)
    assert r.code != 0 and "'ghost'" in r.errtext, r


def hf_split(sd, max_bytes):
    """The Hugging Face tools' shard filling, written from their documented rule."""
    shards, current, size = [], {}, 0
    for k, v in sd.items():
        n = v.numel() * v.element_size()
        if n > max_bytes:
            shards.append({k: v})
            continue
        if size + n > max_bytes and current:
            shards.append(current)
            current, size = {}, 0
        current[k] = v
        size += n
    if current:
        shards.append(current)
    return shards


@pytest.mark.parametrize("to", ["safetensors", "pt"])
def test_convert_to_shards_as_the_hugging_face_tools_write_them(trove, tmp_path, to):
    sd = sample_state_dict()
    torch.save(sd, tmp_path / "m.pt")
    out = tmp_path / "sharded"
    r = trove("convert", tmp_path / "m.pt", out, "--to", to, "--max-shard-size", "40B")
    assert r.code == 0, r
    shards = hf_split(sd, 40)
    stem, ext = ("model", ".safetensors") if to == "safetensors" else ("pytorch_model", ".bin")
    names = [f"{stem}-{i:05d}-of-{len(shards):05d}{ext}" for i in range(1, len(shards) + 1)]
    assert sorted(p.name for p in out.iterdir()) == sorted(names + [stem + ext + ".index.json"])
    index_text = (out / (stem + ext + ".index.json")).read_text()
    weight_map = {k: names[i] for i, part in enumerate(shards) for k in part}
    total = sum(v.numel() * v.element_size() for v in sd.values())
    assert index_text == json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n"
    for name, part in zip(names, shards):
        if to == "safetensors":
            assert (out / name).read_bytes() == spec.write(spec_tensors(part))
        else:
            back = torch.load(out / name)
            assert list(back) == list(part) and all(torch.equal(back[k], v) for k, v in part.items())
    assert trove("diff", out, tmp_path / "m.pt").code == 0


def test_one_shard_is_written_under_the_plain_name(trove, tmp_path):
    torch.save({"w": torch.ones(4)}, tmp_path / "m.pt")
    out = tmp_path / "one"
    assert trove("convert", tmp_path / "m.pt", out, "--to", "safetensors", "--max-shard-size", "5GB").code == 0
    assert [p.name for p in out.iterdir()] == ["model.safetensors"]
    # Without --to, shards are safetensors, as a model directory on the Hub holds them.
    r = trove("convert", tmp_path / "m.pt", tmp_path / "x", "--max-shard-size", "5GB")
    assert r.code == 0, r
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["model.safetensors"]
    r = trove("convert", tmp_path / "m.pt", tmp_path / "y", "--to", "tdz", "--max-shard-size", "5GB")
    assert r.code == 2 and "--to tdz" in r.errtext and not (tmp_path / "y").exists(), r
    r = trove("convert", tmp_path / "m.pt", tmp_path / "z", "--to", "pt", "--max-shard-size", "5 lots")
    assert r.code != 0 and "--max-shard-size" in r.errtext and not (tmp_path / "z").exists()


def test_safetensors_to_safetensors_keeps_the_header_metadata(trove, tmp_path):
    """Nothing lost: a .safetensors source's __metadata__ ({"format": "pt"}, which transformers
    checks on load) goes with its tensors, to a file and to every shard; --metadata adds to it
    and a key given again takes the new value."""
    src = tmp_path / "m.safetensors"
    src.write_bytes(spec.write({"w": ("F32", [2], b"\0" * 8), "b": ("F32", [1], b"\0" * 4)},
                               metadata={"format": "pt", "note": "x"}))
    assert trove("convert", src, tmp_path / "same.safetensors").code == 0
    assert spec.read((tmp_path / "same.safetensors").read_bytes())[1] == {"format": "pt", "note": "x"}
    assert trove("convert", src, tmp_path / "more.safetensors", "--metadata", "format=np",
                 "--metadata", "k=v").code == 0
    assert spec.read((tmp_path / "more.safetensors").read_bytes())[1] == {"format": "np", "note": "x", "k": "v"}
    assert trove("convert", src, tmp_path / "shards", "--to", "safetensors", "--max-shard-size", "8").code == 0
    shards = sorted((tmp_path / "shards").glob("*.safetensors"))
    assert len(shards) == 2
    for shard in shards:
        assert spec.read(shard.read_bytes())[1] == {"format": "pt", "note": "x"}, shard


def test_a_name_holding_a_slash_is_reached_by_that_name(trove, tmp_path):
    """Real files (lerobot, fusebox) name tensors "a/b": the key path is one component
    ("a%2Fb"), and the name itself reaches it too, from the command line; Python names it
    verbatim ("a/b", docs/python.md "Names are verbatim") and takes the key path too."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.environ.get("TROVE_BUILD_DIR", "build"), "python"))
    import trove as trove_module
    path = tmp_path / "slash.safetensors"
    raw = bytes(range(8))
    path.write_bytes(spec.write({"obs/state": ("U8", [8], raw)}))
    r = trove("cat", path, "obs/state", "--raw")
    assert r.code == 0 and r.out == raw, r
    assert trove("cat", path, "obs%2Fstate", "--raw").out == raw
    with trove_module.open(path, framework="np") as f:
        assert f.keys() == ["obs/state"]
        assert f.get_tensor("obs/state").tobytes() == raw
        assert f.get_tensor("obs%2Fstate").tobytes() == raw
