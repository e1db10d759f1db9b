"""Hostile and careless .safetensors files: each is refused with an error naming the file and,
where there is one, the tensor, under the suite's bounds (hostile.run_hostile)."""
import json
import struct

import pytest
import torch

from hostile import run_hostile


def header_file(header_text, body=b"", length=None):
    raw = header_text.encode("utf-8") if isinstance(header_text, str) else header_text
    n = len(raw) if length is None else length
    return struct.pack("<Q", n) + raw + body


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


CASES = {
    "huge_header_length": (header_file("{}", length=(1 << 63)), ["kMaxSafetensorsHeaderBytes"]),
    "header_past_end": (header_file("{}", length=5000), ["past the end"]),
    "too_short": (b"\x01\x00\x00", ["too short"]),
    "overlap": (header_file(json.dumps({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}), b"\0" * 12),
                ["tensor 'b'", "overlaps"]),
    "out_of_range": (header_file(json.dumps({"a": entry("F32", [4], 0, 16)}), b"\0" * 8), ["tensor 'a'", "truncated"]),
    "hole": (header_file(json.dumps({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}), b"\0" * 12),
             ["tensor 'b'", "hole of 4 bytes"]),
    "not_utf8": (header_file(b'{"\xff\xfe":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4), ["not valid JSON"]),
    "duplicate_name": (header_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                   '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', b"\0" * 8),
                       ["'a' appears twice"]),
    "duplicate_field": (header_file('{"a":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4),
                        ["tensor 'a'", "'dtype' appears twice"]),
    "unknown_dtype": (header_file(json.dumps({"a": entry("F128", [1], 0, 16)}), b"\0" * 16), ["tensor 'a'", "unknown dtype 'F128'"]),
    "shape_overflow": (header_file(json.dumps({"a": entry("F32", [1 << 40, 1 << 40], 0, 4)}), b"\0" * 4),
                       ["tensor 'a'", "overflows"]),
    "size_mismatch": (header_file(json.dumps({"a": entry("F32", [3], 0, 8)}), b"\0" * 8), ["tensor 'a'", "needs 12 bytes"]),
    "header_is_array": (header_file('[1, 2]', b""), ["start with '{'"]),
    "header_object_then_garbage": (header_file('{} x', b""), ["not valid JSON"]),
    "tensor_is_a_string": (header_file('{"a":"F32"}', b""), ["tensor 'a'"]),
    "metadata_not_strings": (header_file('{"__metadata__":{"k":1}}', b""), ["__metadata__", "'k'"]),
    "trailing_bytes": (header_file(json.dumps({"a": entry("U8", [2], 0, 2)}), b"\0" * 5), ["3 bytes after the last tensor"]),
    "negative_offset": (header_file('{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}', b"\0"), ["tensor 'a'", "a negative number"]),
    "offsets_reversed": (header_file(json.dumps({"a": entry("U8", [0], 4, 0)}), b"\0" * 4), ["tensor 'a'", "end before"]),
    "missing_field": (header_file('{"a":{"dtype":"U8","shape":[1]}}', b""), ["tensor 'a'", "needs dtype, shape and data_offsets"]),
    "deep_nesting": (header_file('{"a":{"dtype":"U8","shape":' + "[" * 100000 + "]" * 100000 + "}}", b""), ["tensor 'a'"]),
    "rank_beyond_cap": (header_file(json.dumps({"a": entry("U8", [1] * 65, 0, 1)}), b"\0"), ["kMaxTensorRank"]),
    # What the reference refuses (serde_json over the header bytes): NULs as padding or before
    # more JSON, and -0, which it reads as a float; spaces after the object are its own padding.
    "nul_padding": (header_file(json.dumps({"a": entry("U8", [1], 0, 1)}) + "\0\0\0", b"\0"), ["a NUL byte"]),
    "json_after_nul": (header_file(json.dumps({"a": entry("U8", [1], 0, 1)}) + '\0{"b": 1}', b"\0"), ["a NUL byte"]),
    "negative_zero_in_shape": (header_file('{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}', b""), ["'-0'"]),
    "negative_zero_offset": (header_file('{"a":{"dtype":"U8","shape":[1],"data_offsets":[-0,1]}}', b"\0"), ["'-0'"]),
    "odd_f4": (header_file(json.dumps({"a": entry("F4", [2, 1], 0, 1)}), b"\0"),
               ["tensor 'a'", "even last dimension"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("command", ["info", "verify"])
def test_refused_clearly(tmp_path, name, command):
    data, fragments = CASES[name]
    path = tmp_path / (name + ".safetensors")
    path.write_bytes(data)
    r = run_hostile("trove", command, path, watch=tmp_path, expect={1, 2})
    said = r.errtext + r.text  # verify reports problems on stdout
    assert str(path) + ": " in said, r
    for f in fragments:
        assert f in said, (f, r)


def test_convert_of_a_hostile_file_leaves_nothing(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(CASES["overlap"][0])
    r = run_hostile("trove", "convert", path, tmp_path / "out.pt", watch=tmp_path, allowed=[tmp_path / "out.pt"], expect={2})
    assert "overlaps" in r.errtext and not (tmp_path / "out.pt").exists()


def test_failed_write_keeps_the_existing_destination(tmp_path):
    torch.save({"w": torch.ones(2), "epoch": 1}, tmp_path / "src.pt")
    dst = tmp_path / "keep.safetensors"
    dst.write_bytes(b"precious")
    r = run_hostile("trove", "convert", tmp_path / "src.pt", dst, watch=tmp_path, allowed=[dst], expect={2})
    assert "'epoch'" in r.errtext and dst.read_bytes() == b"precious"


@pytest.mark.parametrize("padding", ["        ", " \t\r\n"])
def test_whitespace_after_the_header_object_is_read(tmp_path, padding):
    # The reference pads with spaces (serde_json allows any JSON whitespace after the object).
    path = tmp_path / "padded.safetensors"
    path.write_bytes(header_file(json.dumps({"a": entry("U8", [2], 0, 2)}) + padding, b"\x07\x09"))
    r = run_hostile("trove", "cat", path, "a", "--json", watch=tmp_path, expect={0})
    assert json.loads(r.out)["data"] == [7, 9]


def test_many_tensors_header_is_bounded(tmp_path):
    # A 5 MB header of 100 000 empty tensors: read within the bounds.
    header = {f"t{i}": entry("U8", [0], 0, 0) for i in range(100000)}
    path = tmp_path / "many.safetensors"
    path.write_bytes(header_file(json.dumps(header)))
    r = run_hostile("trove", "info", path, watch=tmp_path, expect={0})
    assert b"100000" in r.out or b"100,000" in r.out


@pytest.mark.parametrize("shard,why", [("../outside.safetensors", "leads out"), ("/etc/hostname", "absolute path"),
                                       ("sub/x.safetensors", "No such file"), ("..", "leads out"),
                                       ("link.safetensors", "leads out"), ("a\\b.safetensors", "plain relative path")])
def test_shard_names_stay_in_the_index_directory(tmp_path, shard, why):
    # Shard names are resolved by the one rule for names a file gives (docs/security.md): relative,
    # inside the index's directory, no link out of it; a sub-folder is allowed (here it is missing).
    inner = tmp_path / "ckpt"
    inner.mkdir()
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(header_file(json.dumps({"w": entry("U8", [1], 0, 1)}), b"\1"))
    (inner / "link.safetensors").symlink_to(outside)
    (inner / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": shard}}))
    r = run_hostile("trove", "info", inner, watch=tmp_path, expect={2})
    assert "model.safetensors.index.json" in r.errtext and why in r.errtext, r
    assert "SECRET" not in r.errtext


def test_deep_index_is_refused(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(
        '{"weight_map": {}, "metadata":' + '{"a":' * 100000 + "1" + "}" * 100000 + "}")
    r = run_hostile("trove", "info", tmp_path, watch=tmp_path, expect={2})
    assert "nested deeper" in r.errtext, r


def test_scan_and_verify_look_inside_every_bin_shard(tmp_path):
    from pickles import call, glob, pickle_of, s, torch_zip
    marker = tmp_path / "ran"
    torch.save({"w": torch.ones(2)}, tmp_path / "pytorch_model-00001-of-00002.bin")
    torch_zip(tmp_path / "pytorch_model-00002-of-00002.bin", pickle_of(call(glob("os", "system"), s(f"touch {marker}"))))
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 8}, "weight_map": {"w": "pytorch_model-00001-of-00002.bin",
                                                       "b": "pytorch_model-00002-of-00002.bin"}}))
    r = run_hostile("trove", "scan", tmp_path, "--json", watch=tmp_path, expect={1})
    report = json.loads(r.out)
    text = json.dumps(report)
    assert "pytorch_model-00002-of-00002.bin/archive/data.pkl" in text and "os.system" in text, r
    r = run_hostile("trove", "verify", tmp_path, watch=tmp_path, expect={1})
    assert "pytorch_model-00002-of-00002.bin" in r.text and "os.system" in r.text, r
    assert not marker.exists()
