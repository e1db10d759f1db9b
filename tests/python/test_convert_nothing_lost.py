"""What a conversion cannot carry is said, and what it carries is carried exactly: tensor names
as the flat formats spell them, metadata the target has no place for, dict keys a tensordict
cannot type, NaN bits through a widening cast. Each output is read back by the peer (torch,
numpy, this suite's own GGUF and safetensors parsers), not by trove."""
import json
import struct

import numpy as np
import torch

from test_gguf import read_gguf, tensor_of, write_gguf


def safetensors_header(path):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n])


def test_gguf_names_are_the_names_safetensors_writes(trove, tmp_path):
    # A key path's components are escaped inside trove ("%3Cfrida%3E"): a flat format names the
    # tensor by the text (a textual-inversion embedding's "<frida>", a nested dict's "a/b").
    src = tmp_path / "names.pt"
    torch.save({"<frida>": torch.ones(2), "with space": torch.zeros(2), "a": {"b": torch.ones(1)}, "50%": torch.ones(3)}, src)
    assert trove("convert", src, tmp_path / "n.gguf").code == 0
    assert trove("convert", src, tmp_path / "n.safetensors").code == 0
    gguf_names = [t[0] for t in read_gguf((tmp_path / "n.gguf").read_bytes())["tensors"]]
    st_names = [k for k in safetensors_header(tmp_path / "n.safetensors") if k != "__metadata__"]
    assert gguf_names == ["<frida>", "with space", "a/b", "50%"], gguf_names
    assert sorted(gguf_names) == sorted(st_names)
    # And back: GGUF -> .pt keeps those names as keys.
    assert trove("convert", tmp_path / "n.gguf", tmp_path / "back.pt").code == 0
    assert list(torch.load(tmp_path / "back.pt", weights_only=True)) == gguf_names


def test_metadata_the_target_cannot_hold_is_said(trove, tmp_path):
    st = tmp_path / "m.safetensors"
    head = json.dumps({"__metadata__": {"format": "pt", "author": "x"},
                       "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    st.write_bytes(struct.pack("<Q", len(head)) + head + bytes(8))
    r = trove("convert", st, tmp_path / "m.pt")
    assert r.code == 0 and "__metadata__ (author, format) is not carried" in r.errtext, r
    r = trove("convert", st, tmp_path / "m2.safetensors")  # carried: no note
    assert r.code == 0 and "not carried" not in r.errtext, r
    assert safetensors_header(tmp_path / "m2.safetensors")["__metadata__"] == {"format": "pt", "author": "x"}
    g = tmp_path / "m.gguf"
    g.write_bytes(write_gguf([("general.architecture", 8, "llama"), ("general.name", 8, "tiny")],
                             [tensor_of("w", np.ones(4, "f4"))]))
    r = trove("convert", g, tmp_path / "g.safetensors")
    assert r.code == 0 and "2 GGUF metadata entries" in r.errtext and "not carried" in r.errtext, r


def test_int_keys_survive_a_tensordict_and_other_keys_are_named(trove, tmp_path):
    # An optimizer state's int keys: a tensordict's keys are str, and trove's marker entry (which
    # tensordict skips) brings them back as ints; a float key is written as its text, said.
    import zipfile
    src = tmp_path / "opt.pt"
    torch.save({"state": {0: {"exp_avg": torch.ones(2)}, 1: {"exp_avg": torch.zeros(2)}}, "k": {1.5: torch.ones(1)}}, src)
    r = trove("convert", src, tmp_path / "opt.tdz")
    assert r.code == 0, r
    assert "1 dict key(s) that are neither str nor int" in r.errtext and "'k/1.5' (float)" in r.errtext, r
    with zipfile.ZipFile(tmp_path / "opt.tdz") as z:
        assert json.loads(z.read("state/meta.json"))["_trove_int_keys"] == ["0", "1"]
    assert trove("convert", tmp_path / "opt.tdz", tmp_path / "back.pt").code == 0
    loaded = torch.load(tmp_path / "back.pt", weights_only=True)
    assert list(loaded["state"]) == [0, 1] and list(loaded["k"]) == ["1.5"], loaded
    assert torch.equal(loaded["state"][0]["exp_avg"], torch.ones(2))


def test_half_and_bfloat16_widen_to_float64_keeping_nan_bits(trove, tmp_path):
    def of_bits(bits, dtype):
        return torch.from_numpy(np.array(bits, dtype=np.uint16).view(np.int16)).view(dtype)

    half = of_bits([0x7C01, 0xFE01, 0x7E55, 0x3C00], torch.float16)
    bf16 = of_bits([0x7F81, 0xFF81, 0x7FC5, 0x3F80], torch.bfloat16)
    src = tmp_path / "nan.pt"
    torch.save({"h": half, "b": bf16}, src)
    assert trove("convert", src, tmp_path / "wide.pt", "--dtype", "float64").code == 0
    wide = torch.load(tmp_path / "wide.pt", weights_only=True)
    for key, t in (("h", half), ("b", bf16)):
        want = t.float().double()  # torch widens through float32
        assert wide[key].dtype == torch.float64
        assert wide[key].view(torch.int64).tolist() == want.view(torch.int64).tolist(), (key, [hex(v & (2**64 - 1)) for v in wide[key].view(torch.int64).tolist()])
