"""Names holding '/' (Hugging Face safetensors: "model/layers.0/w") are given as the file spells them
by `info --json` ("name", beside the key path "key") and reached by that name in `cat`."""
import json
import struct

import safetensors_spec


def write_model(path):
    raw = struct.pack("<2f", 1.5, -2.0)
    path.write_bytes(safetensors_spec.write({
        "model/layers.0/w": ("F32", [2], raw),
        "plain.bias": ("F32", [2], raw),
        "evil\nname": ("F32", [2], raw),
    }))


def test_info_json_has_name_beside_key_path(tmp_path, trove):
    f = tmp_path / "m.safetensors"
    write_model(f)
    r = trove("info", f, "--json")
    assert r.code == 0, r
    by_name = {t["name"]: t["key"] for t in json.loads(r.out)["tensors"]}
    assert by_name == {"model/layers.0/w": "model%2Flayers.0%2Fw", "plain.bias": "plain.bias",
                       "evil\nname": "evil%0Aname"}


def test_cat_reaches_a_name_holding_slashes(tmp_path, trove):
    f = tmp_path / "m.safetensors"
    write_model(f)
    r = trove("cat", f, "model/layers.0/w", "--json")
    assert r.code == 0, r
    assert json.loads(r.out)["data"] == [1.5, -2.0], r.out


def test_colliding_names_keep_their_key_paths(tmp_path, trove):
    import torch
    f = tmp_path / "m.pt"
    torch.save({"a/b": torch.zeros(2), "a": {"b": torch.ones(2)}, "c/d": torch.ones(1)}, f)
    r = trove("info", f, "--json")
    assert r.code == 0, r
    names = sorted(t["name"] for t in json.loads(r.out)["tensors"])
    assert names == ["a%2Fb", "a/b", "c/d"], names


def test_stats_names_tensors_verbatim(tmp_path, trove):
    f = tmp_path / "m.safetensors"
    write_model(f)
    r = trove("stats", f)
    assert r.code == 0, r
    keys = [line.split()[0] for line in r.text.splitlines()[2:5]]
    # As the file spells them (control bytes escaped), not as key paths ("model%2Flayers.0%2Fw").
    assert sorted(keys) == ["evil\\nname", "model/layers.0/w", "plain.bias"], r.text
    assert "%2F" not in r.text and "%0A" not in r.text
    tsv = trove("stats", f, "--tsv").text
    assert "model/layers.0/w\tfloat32" in tsv
    tensors = json.loads(trove("stats", f, "--json").out)["tensors"]
    assert {t["name"]: t["key"] for t in tensors} == {"model/layers.0/w": "model%2Flayers.0%2Fw",
                                                      "plain.bias": "plain.bias", "evil\nname": "evil%0Aname"}
    # The names a summary lists, and --check-finite's lines, are the same names.
    nan = struct.pack("<2f", float("nan"), 1.0)
    f2 = tmp_path / "n.safetensors"
    f2.write_bytes(safetensors_spec.write({"model/layers.0/w": ("F32", [2], nan)}))
    assert "non-finite   1: model/layers.0/w" in trove("stats", f2).text
    r = trove("stats", f2, "--check-finite")
    assert r.code == 1 and ": model/layers.0/w: 1 NaN" in r.text, r
    # A name given back selects its tensor.
    r = trove("stats", f, "model/layers.0/w")
    assert r.code == 0 and "model/layers.0/w" in r.text and "plain.bias" not in r.text, r
