"""trove's GGUF reading against an independent reader: the npm package @huggingface/gguf (pinned in
tests/node/package-lock.json, installed by scripts/install-deps --test into tests/node/node_modules),
run with the system's nodejs by tests/node/gguf_dump.mjs.

For every file of the real-file corpus (TROVE_CORPUS's gguf/), the writer files of test_gguf.py and
files trove writes (GGUF -> GGUF, safetensors -> GGUF, after `trove gguf set`), the metadata (every
key in order, its type, its value; arrays whole, through File.gguf_metadata()) and the tensor infos
(name, ggml type, ne, offset; through File.info(), what `trove info --json` says) agree. Where the
package refuses a file that trove reads, the test names the file and says why, and trove's reading
stays as it is.
"""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import SOURCE, run_tool
from test_gguf import CORPUS, GGML, NO_CORPUS, TYPE_NAMES, sample_files, tensor_of, write_gguf

import trove

NODE_DIR = os.path.join(SOURCE, "tests", "node")
NODE = shutil.which("node") or shutil.which("nodejs")
GGML_ID = {name: t for t, (name, *_rest) in GGML.items()}

# The package refuses these corpus files; trove reads them (docs/gguf.md, "What is read"):
PEER_REFUSES = {
    # GGUF v1 files of August 2023 wrote the magic "FUGG"; the package checks for "GGUF" only.
    "ggerganov__llama.cpp/models__ggml-vocab-llama@e970845.gguf": "not starting with GGUF magic number",
    # The July 2023 draft layout (magic "FUGG"): no loader of today reads it.
    "ggerganov__llama.cpp/example.gguf": "not starting with GGUF magic number",
    # gguf-py's object experiment (type 13): in no specification, ggml refuses it too.
    "ggerganov__llama.cpp/models__test_writer.gguf": "Unsupported metadata type: 13",
}
# The 6-byte file: the package reads the header's missing bytes as zeros (a version-2 file with
# nothing in it); trove and ggml refuse it as cut short.
PEER_READS_PAST_THE_END = {"ollama__ollama/api__test.gguf"}


def peer(*paths):
    """What the package reads from each path: a dict per path (test docstring of gguf_dump.mjs)."""
    # scripts/install-deps --test installs both; without the npm registry it says so and these
    # comparisons skip, naming what is missing.
    if not NODE:
        pytest.skip("nodejs is not installed: run scripts/install-deps --test")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@huggingface", "gguf")):
        pytest.skip("the npm package @huggingface/gguf is not installed in tests/node (scripts/install-deps --test "
                    "installs it; it could not reach the npm registry if it said so)")
    p = subprocess.run([NODE, os.path.join(NODE_DIR, "gguf_dump.mjs"), *map(str, paths)], capture_output=True,
                       timeout=300, cwd=NODE_DIR)
    assert p.returncode == 0, p.stderr.decode()
    out = [json.loads(line) for line in p.stdout.decode().split("\n") if line]  # not splitlines: U+2028 is a token
    assert len(out) == len(paths), out
    return out


def plain(v):
    """The dump's tagged numbers as Python's."""
    if isinstance(v, dict) and "int" in v:
        return int(v["int"])
    if isinstance(v, dict) and "float" in v:
        return float(v["float"])
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def items_of(value):
    """trove's array value (element type, items), nested, as the package gives it: a list."""
    _element, items = value
    return [items_of(x) if isinstance(x, tuple) else x for x in items]


def same(a, b):
    """trove's value `a` is the package's `b`."""
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and np.isnan(a):
        return isinstance(b, float) and np.isnan(b)
    # The package decodes strings with TextDecoder, which drops a leading byte-order mark (the
    # llama vocabulary's token 30143 is U+FEFF alone): the string without it is the package's.
    if isinstance(a, str) and isinstance(b, str) and a.startswith("\ufeff") and a[1:] == b:
        return True
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    return (type(a) is type(b) or numbers) and a == b


def compare_with_peer(path, seen=None):
    """Asserts that trove and the package read `path` alike; returns the package's view."""
    [p] = peer(path)
    assert "error" not in p, (path, p)
    with trove.open(path, raw=True) as f:
        meta = f.gguf_metadata()
        info = f.info()
    props = info["properties"]
    assert props["version"] == p["version"], path
    assert props["byteorder"] == ("little" if p["littleEndian"] else "big"), path
    # Metadata: every key in the file's order, its type, its value (arrays whole).
    assert list(meta) == [e["key"] for e in p["metadata"]], path
    for e in p["metadata"]:
        t, v = meta[e["key"]]
        assert t == TYPE_NAMES[e["type"]], (path, e["key"], t, e["type"])
        want = plain(e["value"])
        if t == "array":
            assert v[0] == TYPE_NAMES[e["subType"]], (path, e["key"], v[0], e["subType"])
            got = items_of(v)
        else:
            got = v
        if t in ("f32", "f64") or (t == "array" and v[0] in ("f32", "f64")):
            want = np.asarray(want, dtype=np.float64)
            np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), want, err_msg=f"{path}: {e['key']}")
        else:
            assert same(got, want), (path, e["key"], str(got)[:200], str(want)[:200])
        if seen is not None:
            seen.add(t if t != "array" else f"array[{v[0]}]")
    # Tensor infos: name, ggml type, ne (ggml's order: trove's shape reversed), offset.
    records = {r["name"]: r for r in info["records"]}
    shapes = {t["key"]: t["shape"] for t in info["tensors"]}
    data_offset = int(p["tensorDataOffset"])
    assert [t["name"] for t in p["tensors"]] == [k for k in shapes], path
    for t in p["tensors"]:
        r = records[t["name"]]
        method = r["method"]
        gname = method.split(" ", 1)[0]
        assert GGML_ID[gname] == t["type"], (path, t["name"], method, t["type"])
        # A block type's shape in values is the method's "[...]"; other types' is the view's.
        shape = json.loads(method.split(" ", 1)[1]) if " " in method else shapes[t["name"]]
        assert [int(n) for n in t["ne"]] == list(reversed(shape)), (path, t["name"], t["ne"], shape)
        assert r["offset"] - data_offset == int(t["offset"]), (path, t["name"])
    return p


@pytest.mark.skipif(not CORPUS, reason=NO_CORPUS)
def test_corpus_agrees_with_the_peer():
    base = os.path.join(CORPUS, "gguf")
    rels = sorted(os.path.relpath(os.path.join(root, n), base) for root, _, names in os.walk(base) for n in names)
    assert len(rels) == 11, rels
    views = peer(*(os.path.join(base, rel) for rel in rels))
    compared = 0
    for rel, view in zip(rels, views):
        path = os.path.join(base, rel)
        if rel in PEER_REFUSES:
            assert PEER_REFUSES[rel] in view.get("error", ""), (rel, view)
            with trove.open(path, raw=True) as f:  # trove reads it
                assert f.format == "gguf"
            continue
        if rel in PEER_READS_PAST_THE_END:
            assert "error" not in view and view["metadata"] == [] and os.path.getsize(path) < 24, view
            with pytest.raises(trove.CorruptError, match="bytes"):
                trove.open(path)
            continue
        compare_with_peer(path)
        compared += 1
    assert compared == 7


def test_writer_files_agree_with_the_peer(tmp_path):
    seen = set()
    for name, (data, _arrays) in sample_files().items():
        path = tmp_path / name
        path.write_bytes(data)
        compare_with_peer(path, seen)
    # Every scalar type, strings, and arrays of them and of arrays.
    assert {"u32", "i64", "f32", "bool", "string", "array[string]", "array[f32]", "array[array]"} <= seen, seen


def every_type_file(tmp_path):
    kvs = [("general.architecture", 8, "llama"), ("t.u8", 0, 255), ("t.i8", 1, -128), ("t.u16", 2, 65535),
           ("t.i16", 3, -32768), ("t.u32", 4, 2**32 - 1), ("t.i32", 5, -2**31), ("t.f32", 6, float("-inf")),
           ("t.nan", 6, float("nan")), ("t.bool", 7, False), ("t.u64", 10, 2**64 - 1), ("t.i64", 11, -2**63),
           ("t.f64", 12, 1e-300), ("t.empty", 9, (4, [])),
           ("t.u64s", 9, (10, [0, 2**63, 2**64 - 1])), ("t.f64s", 9, (12, [0.1, -0.0, 1e308])),
           ("t.strings", 9, (8, ["", "ünï", "a\nb"] * 7)), ("t.bools", 9, (7, [True, False])),
           ("t.nested", 9, (9, [(8, ["x", "y"]), (6, [0.5]), (9, [(0, [1, 2])])]))]
    path = tmp_path / "every_type.gguf"
    path.write_bytes(write_gguf(kvs, [tensor_of("w", np.arange(6, dtype="f4").reshape(2, 3)),
                                      ("q", 12, [256, 2], bytes(range(144)) * 2)]))
    return path


def test_every_value_type_agrees_with_the_peer(tmp_path):
    path = every_type_file(tmp_path)
    seen = set()
    compare_with_peer(path, seen)
    assert len(seen) == 18, seen  # 12 scalar types, arrays of 6
    with trove.open(path) as f:
        meta = f.gguf_metadata()
    assert meta["t.u64"] == ("u64", 2**64 - 1) and meta["t.i64"] == ("i64", -2**63)
    assert meta["t.nested"] == ("array", ("array", [("string", ["x", "y"]), ("f32", [0.5]), ("array", [("u8", [1, 2])])]))
    assert meta["t.strings"][1][1] == ["", "ünï", "a\nb"] * 7  # whole: info() keeps 16, shows none


def test_files_trove_writes_agree_with_the_peer(tmp_path, trove):
    # GGUF -> GGUF
    src = every_type_file(tmp_path)
    out = tmp_path / "copy.gguf"
    assert trove("convert", src, out).code == 0
    compare_with_peer(out)
    # safetensors -> GGUF
    st = tmp_path / "a.safetensors"
    import torch
    torch.save({"w": torch.ones(3, 4), "b": torch.arange(5, dtype=torch.bfloat16), "i": torch.arange(3)}, tmp_path / "a.pt")
    assert trove("convert", tmp_path / "a.pt", st).code == 0
    made = tmp_path / "from_st.gguf"
    r = trove("convert", st, made, "--metadata", "general.architecture=tiny")
    assert r.code == 0, r
    p = compare_with_peer(made)
    assert sorted(t["name"] for t in p["tensors"]) == ["b", "i", "w"]
    # after `trove gguf set`: a long string, a new number, a changed alignment
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}" * 40
    for args in (("tokenizer.chat_template", template), ("t.added", "7", "--type", "u16"),
                 ("general.alignment", "64", "--type", "u32")):
        r = trove("gguf", "set", out, *args)
        assert r.code == 0, r
        view = compare_with_peer(out)
    meta = {e["key"]: e["value"] for e in view["metadata"]}
    assert meta["tokenizer.chat_template"] == template and meta["t.added"] == 7 and meta["general.alignment"] == 64
    # A key trove writes is printable ASCII (gguf.md): a control or a space is refused, the file unchanged.
    before = out.read_bytes()
    for key in ("k\x1b[31m", "my key", "caf\u00e9"):
        r = trove("gguf", "set", out, key, "v")
        assert r.code == 2 and "printable ASCII" in r.errtext and "\x1b" not in r.errtext, r
        r = trove("convert", src, tmp_path / "m.gguf", "--metadata", key + "=v")
        assert r.code == 2 and "printable ASCII" in r.errtext and not (tmp_path / "m.gguf").exists(), r
    assert out.read_bytes() == before


def test_gguf_metadata_is_for_gguf_and_capped(tmp_path):
    import torch
    torch.save({"w": torch.ones(2)}, tmp_path / "a.pt")
    with trove.open(tmp_path / "a.pt") as f:
        with pytest.raises(trove.UnsupportedError, match="not a GGUF file"):
            f.gguf_metadata()
    # Arrays of 3 x 1 Mi items: read (info() keeps 16 of each), but more than a whole read holds.
    big = tmp_path / "big.gguf"
    big.write_bytes(write_gguf([(f"a{i}", 9, (0, bytes(1 << 20))) for i in range(3)], []))
    with trove.open(big) as f:
        assert f.info()["properties"]["a0"] == "1,048,576 u8 values"
        with pytest.raises(trove.LimitError, match="2,097,152 items"):
            f.gguf_metadata()
