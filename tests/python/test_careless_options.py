"""Option words a person or a script gets wrong: every one a usage error naming the option and
the word (exit 2), never a silent default, a wrapped-around number or an overflow further in."""
import struct

import pytest
import torch


@pytest.fixture
def pt(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"a": torch.arange(12, dtype=torch.float32).reshape(4, 3), "ids": torch.arange(4)}, path)
    return path


@pytest.mark.parametrize("args, option", [
    (["cat", "{pt}", "a", "--head", "-1"], "--head"),             # was: everything printed
    (["cat", "{pt}", "a", "--head", "0"], "--head"),              # 0 meant "not asked"
    (["cat", "{pt}", "a", "--head", "18446744073709551616"], "--head"),
    (["diff", "{pt}", "{pt}", "--top", "-1"], "--top"),
    (["diff", "{pt}", "{pt}", "--atol", "-1"], "--atol"),
    (["diff", "{pt}", "{pt}", "--rtol", "nan"], "--rtol"),
    (["diff", "{pt}", "{pt}", "--atol", "-inf"], "--atol"),
    (["info", "{pt}", "--depth", "0"], "--depth"),                # was: a 309-digit range
    (["convert", "{pt}", "{out}.psk.d", "--vocab", "-1"], "--vocab"),  # was: idx[18446744073709551615]
    (["convert", "{pt}", "{out}.psk.d", "--vocab", "18446744073709551616"], "--vocab"),
    (["convert", "{pt}", "{out}.safetensors", "--max-shard-size", ""], "--max-shard-size"),  # was: one file
    (["convert", "{pt}", "{out}.safetensors", "--dtype", ""], "--dtype"),  # was: nothing cast
])
def test_a_wrong_option_word_is_a_usage_error(trove, pt, tmp_path, args, option):
    args = [a.format(pt=pt, out=tmp_path / "out") for a in args]
    r = trove(*args)
    assert r.code == 2 and option in r.errtext and "usage" in r.errtext, r
    assert not list(tmp_path.glob("out*")), list(tmp_path.glob("out*"))


@pytest.mark.parametrize("size, says", [
    ("0MB", "'0MB' is out of range"),
    ("18446744073709551615", "'18446744073709551615' is out of range"),  # was: "takes a number and a unit"
    ("5XB", "takes a number and a unit"),
])
def test_a_shard_size_is_a_number_and_a_unit_in_range(trove, pt, tmp_path, size, says):
    r = trove("convert", pt, tmp_path / "out.safetensors", "--max-shard-size", size)
    assert r.code == 2 and "--max-shard-size" in r.errtext and says in r.errtext, r
    assert not list(tmp_path.glob("out*"))


def test_a_slice_step_near_int64_max_takes_the_first_row(trove, pt):
    # ceil((stop - start) / step) overflowed: "negative size -1 in shape", blamed on the file.
    for step in ("9223372036854775807", "9223372036854775806"):
        r = trove("cat", pt, f"a[::{step}]")
        assert r.code == 0 and "[1, 3]" in r.text and "0, 1, 2" in r.text.replace(".0", ""), r
    r = trove("cat", pt, "a[-9223372036854775808::9223372036854775807]")
    assert r.code == 0 and "[1, 3]" in r.text, r


def gguf_with(kvs):
    """A GGUF v3 holding string key/values and no tensors."""
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for k, v in kvs.items():
        out += struct.pack("<Q", len(k)) + k.encode() + struct.pack("<IQ", 8, len(v)) + v.encode()
    return out


def test_gguf_set_holds_the_value_given_or_refuses(trove, tmp_path):
    g = tmp_path / "g.gguf"
    g.write_bytes(gguf_with({"general.architecture": "llama"}))
    before = g.read_bytes()
    # A finite number beyond f32 would have been written as inf.
    r = trove("gguf", "set", g, "x.scale", "1e39", "--type", "f32")
    assert r.code == 2 and "within f32" in r.errtext, r
    assert g.read_bytes() == before
    # general.alignment is a u32 whether or not --type says so (a new key was a string).
    r = trove("gguf", "set", g, "general.alignment", "128")
    assert r.code == 0, r
    r = trove("info", g, "--json")
    assert r.code == 0 and '"general.alignment"' in r.text, r


def test_a_metadata_key_given_twice_is_refused(trove, pt, tmp_path):
    out = tmp_path / "m.safetensors"
    r = trove("convert", pt, out, "--metadata", "k=v", "--metadata", "k=w")
    assert r.code == 2 and "'k' twice" in r.errtext, r  # it kept the last one
    assert not out.exists()
