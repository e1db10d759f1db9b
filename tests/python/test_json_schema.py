"""Every command's --json, on every format, is what docs/json.schema.json says (docs/json.md).

The files are made by their real writers where there is one here (torch.save for .pt, zip and
legacy) and by trove and presk otherwise; each command's output is checked against the schema
with the small validator below (the subset of JSON Schema the schema uses), and the tags are
checked for what they stand for.
"""
import base64
import json
import os
import re
import shutil

import pytest
import torch

from conftest import SOURCE, run_tool

with open(os.path.join(SOURCE, "docs", "json.schema.json"), encoding="utf-8") as f:
    SCHEMA = json.load(f)


def _resolve(ref):
    assert ref.startswith("#/$defs/"), ref
    return SCHEMA["$defs"][ref[len("#/$defs/"):]]


def _is_type(x, t):
    if t == "null":
        return x is None
    if t == "boolean":
        return isinstance(x, bool)
    if t == "integer":
        return isinstance(x, int) and not isinstance(x, bool)
    if t == "number":
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    if t == "string":
        return isinstance(x, str)
    if t == "array":
        return isinstance(x, list)
    if t == "object":
        return isinstance(x, dict)
    raise AssertionError("schema type " + t)


KNOWN = {"$schema", "title", "$defs", "$ref", "type", "const", "enum", "oneOf", "not", "properties", "required",
         "additionalProperties", "propertyNames", "pattern", "items", "prefixItems", "minItems", "maxItems",
         "minimum", "maximum"}


def errors(x, s, at="$"):
    """The reasons `x` does not match schema `s` (empty: it matches)."""
    assert set(s) <= KNOWN, set(s) - KNOWN  # a keyword this validator would silently ignore
    if "$ref" in s:
        return errors(x, _resolve(s["$ref"]), at)
    out = []
    if "type" in s and not _is_type(x, s["type"]):
        return [f"{at}: {json.dumps(x)[:80]} is not of type {s['type']}"]
    if "const" in s and not (x == s["const"] and type(x) is type(s["const"])):
        out.append(f"{at}: {x!r} is not {s['const']!r}")
    if "enum" in s and x not in s["enum"]:
        out.append(f"{at}: {x!r} not in {s['enum']}")
    if "minimum" in s and x < s["minimum"] or "maximum" in s and x > s["maximum"]:
        out.append(f"{at}: {x} out of range")
    if "pattern" in s and not re.search(s["pattern"], x):
        out.append(f"{at}: {x!r} does not match {s['pattern']}")
    if "oneOf" in s:
        matching = [i for i, alt in enumerate(s["oneOf"]) if not errors(x, alt, at)]
        if len(matching) != 1:
            out.append(f"{at}: {json.dumps(x)[:120]} matches {len(matching)} of the alternatives, not one")
    if "not" in s and not errors(x, s["not"], at):
        out.append(f"{at}: matches what it must not")
    if isinstance(x, dict):
        for name in s.get("required", []):
            if name not in x:
                out.append(f"{at}: missing {name!r}")
        props = s.get("properties", {})
        for k, v in x.items():
            if "propertyNames" in s:
                out += errors(k, s["propertyNames"], f"{at}.<{k}>")
            if k in props:
                out += errors(v, props[k], f"{at}.{k}")
            elif s.get("additionalProperties") is False:
                out.append(f"{at}: unexpected member {k!r}")
            elif isinstance(s.get("additionalProperties"), dict):
                out += errors(v, s["additionalProperties"], f"{at}.{k}")
    if isinstance(x, list):
        if len(x) < s.get("minItems", 0) or len(x) > s.get("maxItems", len(x)):
            out.append(f"{at}: {len(x)} items")
        prefix = s.get("prefixItems", [])
        for i, item in enumerate(x):
            if i < len(prefix):
                out += errors(item, prefix[i], f"{at}[{i}]")
            elif "items" in s:
                out += errors(item, s["items"], f"{at}[{i}]")
    return out


def check(obj, command):
    assert obj["schema_version"] == 1 and obj["command"] == command, obj
    problems = errors(obj, SCHEMA)
    if problems:  # say why against the command's own schema, not only "no alternative matched"
        name = {"cat": "cat_tensor" if "data" in obj else "cat_value", "data info": "data_info"}.get(command, command)
        name = "error" if "error" in obj else name
        problems = errors(obj, SCHEMA["$defs"][name]) or problems
    assert not problems, "\n".join(problems[:20])
    return obj


def run_json(tool, *args, expect=(0,), command=None, lines=False):
    r = run_tool(tool, *args)
    assert r.code in expect, r
    command = command or str(args[0])
    if lines:
        return [check(json.loads(line), command) for line in r.text.splitlines()]
    return check(json.loads(r.out), command)


def test_the_validator_can_fail():
    assert errors({"$tuple": [1], "x": 2}, {"$ref": "#/$defs/value"})
    assert errors({"$elided": True, "$int": "1"}, {"$ref": "#/$defs/value"})
    assert errors(float("nan"), {"$ref": "#/$defs/count"})
    assert errors({"a": 1}, {"type": "object", "properties": {"a": {"type": "string"}}})
    assert not errors({"a": {"$set": [1, {"$float": "nan"}]}}, {"$ref": "#/$defs/value"})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("json")
    torch.manual_seed(0)
    tensors = {"model": {"w": torch.randn(3, 4), "b": torch.zeros(4), "i": torch.arange(3), "h": torch.ones(2).half(),
                         "flag": torch.tensor([True, False])},
               "meta": {"epoch": 3, "name": "tiny"}}
    torch.save(tensors, d / "model.pt")
    torch.save({"w": torch.randn(2, 2), "n": torch.arange(4)}, d / "legacy.pt", _use_new_zipfile_serialization=False)
    values = {"w": torch.tensor([1e5, 1e-8, -1.0, float("nan")]), "epoch": 3, "lr": 0.001, "one": 1.0,
              "betas": (0.9, 0.999), "c": 1 + 2j, "s": {7}, "blob": b"\x00\xff", "big": 2 ** 70, "nan": float("nan"),
              "inf": float("-inf"), "none": None, "flag": True, 3: "an int key", "$x": "a key like a tag"}
    torch.save(values, d / "values.pt")
    out = {"pt": d / "model.pt", "legacy": d / "legacy.pt", "values": d / "values.pt"}
    for name, dst, extra in (("tensordict", d / "td", ["--to", "tensordict"]), ("tdz", d / "model.tdz", []),
                             ("safetensors", d / "model.safetensors", ["--drop-values"]),
                             ("sharded", d / "sharded", ["--to", "safetensors", "--max-shard-size", "64B", "--drop-values"])):
        r = run_tool("trove", "convert", d / "model.pt", dst, *extra)
        assert r.code == 0, r
        out[name] = dst
    (d / "s.txt").write_text("1 2.5 0.25 -1\n3 0.1 1e300 2\n")
    r = run_tool("presk", "data", "pack", "--type", "(idx[4][], R[3])", d / "s.txt", "-o", d / "s.psk.d")
    assert r.code == 0, r
    out["pskd"] = d / "s.psk.d"
    out["dir"] = d
    return out


FORMATS = ["pt", "legacy", "values", "tensordict", "tdz", "safetensors", "sharded", "pskd"]


@pytest.mark.parametrize("name", FORMATS)
def test_every_command_on_every_format(files, name, tmp_path):
    path = files[name]
    info = run_json("trove", "info", path, "--json")
    assert info["tensors"], info
    key = info["tensors"][0]["key"]
    run_json("trove", "info", path, "--json", "--keys", key)
    run_json("trove", "verify", path, "--json")
    run_json("trove", "verify", path, "--json", "--sha256")
    run_json("trove", "scan", path, "--json")
    run_json("trove", "stats", path, "--json", "--hist", "4")
    rows = run_json("trove", "cat", path, "**", "--json", lines=True, command="cat")
    assert len(rows) >= len(info["tensors"])
    run_json("trove", "diff", path, files["pt"], "--json", expect=(0, 1))
    dst = tmp_path / "out.safetensors"
    conv = run_json("trove", "convert", path, dst, "--json", "--dtype", "float16", "--drop-values")
    assert conv["destination"] == str(dst) and conv["cast"]["dtype"] == "float16"
    if name == "pskd":
        for tool in (("presk", "data"), ("trove", "data")):
            run_json(*tool, "info", path, "--json", "--samples", "2", command="data info")


def test_a_failing_command_prints_its_error_as_json(files, tmp_path):
    # A script reads stdout: a command given --json that fails says why there too, not only on
    # stderr, and exits 2 as without --json.
    junk = tmp_path / "notes.pt"
    junk.write_bytes(b"\x1b[31mnot a checkpoint\n")
    missing = tmp_path / "missing.pt"
    cases = [("info", [junk], "unsupported", junk), ("cat", [junk, "**"], "unsupported", junk),
             ("stats", [missing], "not-found", missing), ("diff", [files["pt"], missing], "not-found", missing),
             ("convert", [junk, tmp_path / "o.safetensors"], "unsupported", junk), ("info", [""], "usage", None)]
    for command, args, code, path in cases:
        r = run_tool("trove", command, *args, "--json")
        assert r.code == 2, r
        obj = check(json.loads(r.out), command)
        e = obj["error"]
        assert e["code"] == code and e["file"] == (str(path) if path else None) and e["spec_code"] is None, obj
        assert e["reason"] in e["message"] and e["entry"] is None, obj
        assert "trove: error:" in r.errtext and "\x1b" not in r.errtext, r
    assert not (tmp_path / "o.safetensors").exists()
    # Without --json, stdout stays empty.
    r = run_tool("trove", "info", junk)
    assert r.code == 2 and r.out == b"", r
    # presk data info says which E9xxx code, as its stderr line does.
    for tool in (("presk", "data"), ("trove", "data")):
        r = run_tool(*tool, "info", junk, "--json")
        assert r.code == 2 and "error[E9002]" in r.errtext, r
        e = check(json.loads(r.out), "data info")["error"]
        assert e["spec_code"] == 9002 and e["file"] == str(junk), e


def test_verify_and_scan_go_on_past_a_path_they_cannot_read(files, tmp_path):
    # `trove verify downloads/*`: a file that is no checkpoint (or is missing) is reported in its
    # place, the others are still checked, and the exit status says a path could not be read.
    junk = tmp_path / "notes.pt"
    junk.write_bytes(b"not a checkpoint\n")
    paths = [files["pt"], junk, tmp_path / "missing.pt", files["safetensors"]]
    for command, flag in (("verify", "ok"), ("scan", "failing")):
        r = run_tool("trove", command, *paths, "--json")
        assert r.code == 2, r
        obj = check(json.loads(r.out), command)
        assert [f["path"] for f in obj["files"]] == [str(p) for p in paths], obj
        assert obj[flag] is (command == "scan"), obj
        good, bad, missing, last = obj["files"]
        assert "error" not in good and "error" not in last and last["format"] == "safetensors", obj
        assert bad["error"]["code"] == "unsupported" and bad["error"]["file"] == str(junk), obj
        assert missing["error"]["code"] == "not-found", obj
        r = run_tool("trove", command, *paths)
        assert r.code == 2 and r.errtext.count("trove: error:") == 2, r
        assert str(files["safetensors"]) in r.text, r


def test_verify_and_scan_are_one_shape_for_one_or_many_paths(files):
    paths = [files[n] for n in FORMATS]
    for command in ("verify", "scan"):
        one = run_json("trove", command, paths[0], "--json")
        many = run_json("trove", command, *paths, "--json")
        assert len(one["files"]) == 1 and len(many["files"]) == len(paths)
        assert many["files"][0] == one["files"][0]
    by_format = {f["format"]: f for f in run_json("trove", "verify", *paths, "--json")["files"]}
    # Formats without checksums say so in bytes; a zip's CRCs cover its entries.
    for fmt in ("tensordict", "pskd", "safetensors", "pt-legacy"):
        assert by_format[fmt]["bytes_without_checksum"] == by_format[fmt]["bytes_checked"] > 0, fmt
    assert by_format["pt"]["bytes_without_checksum"] == 0 and by_format["tdz"]["bytes_without_checksum"] == 0


def test_values_are_tagged_where_plain_json_is_ambiguous(files):
    values = run_json("trove", "info", files["values"], "--json")["values"]
    pairs = values["$dict"]  # an int key and a key that looks like a tag: the pairs form
    got = {json.dumps(k): v for k, v in pairs}
    assert got['"epoch"'] == 3 and got['"lr"'] == 0.001 and got['"one"'] == 1.0 and isinstance(got['"one"'], float)
    assert got['"betas"'] == {"$tuple": [0.9, 0.999]}
    assert got['"c"'] == {"$complex": [1.0, 2.0]}
    assert got['"s"'] == {"$set": [7]}
    assert base64.b64decode(got['"blob"']["$bytes"]) == b"\x00\xff"
    assert got['"big"'] == {"$int": str(2 ** 70)}
    assert got['"nan"'] == {"$float": "nan"} and got['"inf"'] == {"$float": "-inf"}
    assert got['"none"'] is None and got['"flag"'] is True
    assert got["3"] == "an int key" and got['"$x"'] == "a key like a tag"
    assert got['"w"'] == {"$tensor": {"dtype": "float32", "shape": [4]}}
    data = run_json("trove", "cat", files["values"], "w", "--json", command="cat")["data"]
    assert data[:3] == torch.tensor([1e5, 1e-8, -1.0]).tolist() and data[3] == {"$float": "nan"}


def test_properties_are_typed(files):
    info = run_json("trove", "info", files["pt"], "--json")
    props = info["properties"]
    recorded = any(r["name"].endswith("/byteorder") for r in info["records"])  # torch >= 2.1 writes one
    assert props["version"] == 3 and props["byteorder"] == "little" and props["byteorder_assumed"] is (not recorded)
    assert isinstance(props["pickle_protocol"], int)
    props = run_json("trove", "info", files["tensordict"], "--json")["properties"]
    assert isinstance(props["leaves"], int)
    props = run_json("trove", "info", files["pskd"], "--json")["properties"]
    assert props["count"] == 2 and props["encodings"] == "u8, f64"  # index leaves by their width


def test_one_float_text_in_every_command(files):
    # 0.1 as a Python float: the same digits in info, cat, diff and presk data info, text and JSON.
    r = run_tool("trove", "cat", files["values"], "lr")
    assert r.text == "lr = 0.001\n"
    r = run_tool("trove", "diff", files["values"], files["pt"])
    assert "value:     lr: 0.001 -> (absent)" in r.text
    r = run_tool("presk", "data", "info", files["pskd"])
    assert "[1] (3, [0.1, 1e+300, 2.0])" in r.text
    sample = run_json("presk", "data", "info", files["pskd"], "--json", command="data info")["samples"][1]
    assert sample["value"] == {"$tuple": [3, [0.1, 1e300, 2.0]]}
    diff = run_json("trove", "diff", files["values"], files["pt"], "--json", expect=(1,))
    lr = [v for v in diff["values"] if v["key"] == "lr"][0]
    assert lr == {"key": "lr", "change": "only_in_a", "a": 0.001}


def test_scan_names_the_key_path_and_the_call(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo hi",))
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(1), "cfg": {"hook": Evil()}}, path)
    scan = run_json("trove", "scan", path, "--json", expect=(1,))
    [critical] = [f for f in scan["files"][0]["findings"] if f["severity"] == "critical"]
    assert critical["key_path"] == "cfg/hook" and critical["call"] == "posix.system('echo hi')", critical
    r = run_tool("trove", "scan", path)
    assert "(key cfg/hook)" in r.text and "call: posix.system('echo hi')" in r.text, r


def test_convert_counts_what_a_cast_loses(files, tmp_path):
    conv = run_json("trove", "convert", files["values"], tmp_path / "h.safetensors", "--json", "--dtype", "float16",
                    "--drop-values")
    cast = conv["cast"]
    # 1e5 overflows float16, 1e-8 underflows; -1 and NaN go through.
    assert (cast["overflowed"], cast["underflowed"], cast["sign_lost"]) == (1, 1, 0), cast
    assert cast["lossy_tensors"] == [{"key": "w", "dtype": "float32", "to": "float16", "overflowed": 1,
                                      "underflowed": 1, "sign_lost": 0}]
    assert conv["warnings"] == ["--dtype float16: 1 overflowed to inf, 1 underflowed to zero (in 1 tensor: w)"]
    r = run_tool("trove", "convert", files["values"], tmp_path / "h2.safetensors", "--dtype", "float16", "--drop-values")
    assert r.code == 0 and "trove: warning: " in r.errtext and "1 overflowed to inf" in r.errtext, r
    r = run_tool("trove", "convert", files["pt"], tmp_path / "f.safetensors", "--dtype", "bfloat16", "--drop-values")
    assert r.code == 0 and "warning" not in r.errtext, r


def test_floats_print_as_python_repr_prints_them(tmp_path):
    # Random doubles over the whole exponent range, and the edges of positional notation.
    torch.manual_seed(1)
    bits = torch.randint(-2 ** 62, 2 ** 62, (2000,), dtype=torch.int64).view(torch.float64)
    edges = torch.tensor([1e-4, 9.999e-5, 1e16, 9999999999999998.0, 0.5, -0.0, 5e-324, 1.7976931348623157e308],
                         dtype=torch.float64)
    t = torch.cat([bits[torch.isfinite(bits)], edges])
    torch.save({"t": t}, tmp_path / "f.pt")
    r = run_tool("trove", "cat", tmp_path / "f.pt", "t", "--json")
    text = r.text[r.text.index('"data":[') + len('"data":['):r.text.rindex("]")]
    assert text.split(", ") == [repr(x) for x in t.tolist()]


def test_quantized_tensors_and_their_quantizers(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(4, 3)
    path = str(tmp_path / "q.pt")
    torch.save({"q": torch.quantize_per_tensor(x, 0.05, 3, torch.qint8),
                "qc": torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.05, 0.3], dtype=torch.double),
                                                 torch.tensor([0, 1, 7, 2]), 0, torch.quint8)}, path)
    doc = run_json("trove", "info", path, "--json", command="info")
    assert {t["key"]: t["quantizer"]["scheme"] for t in doc["tensors"]} == {
        "q": "per_tensor_affine", "qc": "per_channel_affine"}
    for flags in ((), ("--dequantize",)):
        for key in ("q", "qc"):
            run_json("trove", "cat", path, key, "--json", *flags, command="cat")
    run_json("trove", "stats", path, "--json", command="stats")
