"""trove's GGUF reader against a GGUF reader and writer written here (issue 27, phase 1).

The writer and reader below use only the struct module and the byte layout of ggml's
docs/gguf.md; they share no code with trove. tests/formats/gguf/gguf_probe (built with the tests)
prints what trove's ReadGguf sees: every metadata value as a property, every tensor's dtype,
shape and the CRC-32 of its bytes. Files the writer makes round-trip through the probe, the
command line and the Python module; the real-file corpus (TROVE_CORPUS, its gguf/ directory) is
compared file by file (without TROVE_CORPUS that test is skipped). The fuzz seeds in
fuzz/corpus/gguf_fuzz are this writer's files (test_fuzz_seeds_are_the_writers).
"""
import json
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

from conftest import BIN_DIR, SOURCE, run_tool

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(SOURCE, "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))

import trove  # noqa: E402

PROBE = os.path.join(BIN_DIR, "gguf_probe")
CORPUS = os.environ.get("TROVE_CORPUS")
NO_CORPUS = "TROVE_CORPUS is not set (the directory of the real-file corpus: MANIFEST.tsv, gguf/, ...)"
SEEDS = os.path.join(SOURCE, "fuzz", "corpus", "gguf_fuzz")

if not os.path.exists(PROBE):
    pytest.skip(f"{PROBE} was not built", allow_module_level=True)

# Metadata value types: struct code, or None for string (8) and array (9).
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}
TYPE_NAMES = {0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32", 6: "f32", 7: "bool", 8: "string",
              9: "array", 10: "u64", 11: "i64", 12: "f64", 13: "object"}
# 13: an experiment of gguf-py's writer (2024, llama.cpp's models/test_writer.gguf): an object is
# an array of its members' names; an array of arrays or objects holds only type and count, its
# elements being keys of their own, ".<key>[<i>]", which come next.
# ggml types: id -> (name, values per block, bytes per block, trove dtype). Q8_1 is ggml's
# block_q8_1 (two halves and 32 quants: 36 bytes; gguf-py's table says 40, ggml reads 36).
GGML = {
    0: ("F32", 1, 4, "float32"), 1: ("F16", 1, 2, "float16"), 2: ("Q4_0", 32, 18, None), 3: ("Q4_1", 32, 20, None),
    6: ("Q5_0", 32, 22, None), 7: ("Q5_1", 32, 24, None), 8: ("Q8_0", 32, 34, None), 9: ("Q8_1", 32, 36, None),
    10: ("Q2_K", 256, 84, None), 11: ("Q3_K", 256, 110, None), 12: ("Q4_K", 256, 144, None),
    13: ("Q5_K", 256, 176, None), 14: ("Q6_K", 256, 210, None), 15: ("Q8_K", 256, 292, None),
    16: ("IQ2_XXS", 256, 66, None), 17: ("IQ2_XS", 256, 74, None), 18: ("IQ3_XXS", 256, 98, None),
    19: ("IQ1_S", 256, 50, None), 20: ("IQ4_NL", 32, 18, None), 21: ("IQ3_S", 256, 110, None),
    22: ("IQ2_S", 256, 82, None), 23: ("IQ4_XS", 256, 136, None), 24: ("I8", 1, 1, "int8"),
    25: ("I16", 1, 2, "int16"), 26: ("I32", 1, 4, "int32"), 27: ("I64", 1, 8, "int64"), 28: ("F64", 1, 8, "float64"),
    29: ("IQ1_M", 256, 56, None), 30: ("BF16", 1, 2, "bfloat16"), 34: ("TQ1_0", 256, 54, None),
    35: ("TQ2_0", 256, 66, None), 39: ("MXFP4", 32, 17, None),
}
NUMPY_OF = {"F32": "f4", "F16": "f2", "F64": "f8", "I8": "i1", "I16": "i2", "I32": "i4", "I64": "i8", "BF16": "u2"}


def probe(path):
    p = subprocess.run([PROBE, str(path)], capture_output=True, timeout=300)
    assert p.returncode in (0, 1), p
    return json.loads(p.stdout)


# ---------------------------------------------------------------------------------------------
# The writer.

class Writer:
    def __init__(self, version=3, big=False):
        self.e = ">" if big else "<"
        self.version = version
        self.out = bytearray()

    def pack(self, fmt, *v):
        self.out += struct.pack(self.e + fmt, *v)

    def count(self, n):
        self.pack("I" if self.version == 1 else "Q", n)

    def string(self, s):
        b = s.encode() if isinstance(s, str) else s
        self.count(len(b))
        self.out += b

    def value(self, t, v):
        if t == 8:
            self.string(v)
        elif t == 9:
            et, items = v
            self.pack("I", et)
            self.count(len(items))
            for item in items:
                self.value(et, item)
        else:
            self.pack(SCALAR[t], v)


def write_gguf(kvs, tensors, version=3, big=False, alignment=32, magic=b"GGUF"):
    """kvs: [(key, type, value)]; tensors: [(name, ggml type id, ne, raw bytes)]. Returns bytes."""
    w = Writer(version, big)
    w.out += magic
    w.pack("I", version)
    w.count(len(tensors))
    w.count(len(kvs))
    for key, t, v in kvs:
        w.string(key)
        w.pack("I", t)
        w.value(t, v)
    offset = 0
    offsets = []
    for name, t, ne, raw in tensors:
        w.string(name)
        w.pack("I", len(ne))
        for d in ne:
            w.pack("I" if version == 1 else "Q", d)
        w.pack("I", t)
        w.pack("Q", offset)
        offsets.append(offset)
        offset += (len(raw) + alignment - 1) // alignment * alignment
    w.out += b"\0" * (-len(w.out) % alignment)
    for (_, _, _, raw), at in zip(tensors, offsets):
        w.out += raw + b"\0" * (-len(raw) % alignment)
    return bytes(w.out)


def tensor_of(name, a, big=False):
    """A numpy array as a tensor of the writer: ne is its shape reversed."""
    kind = {"f4": 0, "f2": 1, "f8": 28, "i1": 24, "i2": 25, "i4": 26, "i8": 27}[f"{a.dtype.kind}{a.dtype.itemsize}"]
    raw = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder(">" if big else "<")).tobytes()
    return (name, kind, list(reversed(a.shape)), raw)


# ---------------------------------------------------------------------------------------------
# The reader.

def read_gguf(data):
    """{version, big, draft, kv: {key: (type, value)}, tensors: [(name, ne, type, offset)], data_offset}"""
    if len(data) < 8 or data[:4] not in (b"GGUF", b"FUGG"):
        raise ValueError(f"not GGUF ({len(data)} bytes)")
    e = "<"
    version = struct.unpack_from("<I", data, 4)[0]
    if version & 0xFFFF == 0:
        e, version = ">", struct.unpack_from(">I", data, 4)[0]
    pos = 8

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(e + fmt, data, pos)
        pos += struct.calcsize(e + fmt)
        return v[0]

    cnt = "I" if version == 1 else "Q"

    def string():
        nonlocal pos
        n = take(cnt)
        s = data[pos:pos + n]
        assert len(s) == n
        pos += n
        return s.decode("utf-8", "replace")

    n_tensors, n_kv = take(cnt), take(cnt)
    draft = data[:4] == b"FUGG" and version == 1 and n_kv > 0 and struct.unpack_from("<II", data, pos)[0] == 8 \
        and struct.unpack_from("<II", data, pos)[1] < (1 << 24)

    def tag(expected):
        if draft:
            assert take("I") == expected

    def next_key_is(name):
        n = struct.unpack_from(e + cnt, data, pos)[0] if pos + 8 <= len(data) else -1
        size = struct.calcsize(cnt)
        return n == len(name) and data[pos + size:pos + size + n] == name.encode()

    def value(t, key):
        if t == 8:
            return string()
        if t in (9, 13):
            et, n = take("I"), take(cnt)
            if et in (9, 13) and n and next_key_is(f".{key}[0]"):
                return (et, n, "as keys")
            return (et, [value(et, key) for _ in range(n)])
        v = take(SCALAR[t])
        return bool(v) if t == 7 else v

    kv = {}
    for _ in range(n_kv):
        tag(8)
        key = string()
        t = take("I")
        kv[key] = (t, value(t, key))
    alignment = kv.get("general.alignment", (4, 32))[1]
    tensors = []
    for _ in range(n_tensors):
        tag(8)
        name = string()
        tag(5)
        n_dims = take("I")
        ne = []
        for _ in range(n_dims):
            tag(5)
            ne.append(take(cnt))
        tag(5)
        t = take("I")
        offset = take("Q")
        tensors.append((name, ne, t, offset))
        if draft:
            pos += -pos % alignment
    data_offset = pos + (-pos % alignment)
    return {"version": version, "big": e == ">", "draft": draft, "kv": kv, "tensors": tensors,
            "data_offset": data_offset}


def text_of(t, v, key=""):
    """A value as trove's properties show it (docs/gguf.md)."""
    if t == 7:
        return "true" if v else "false"
    if t in (6, 12):
        return "%.9g" % v
    if t == 8:
        return v
    if t in (9, 13) and len(v) == 3:
        return f"{v[1]:,} {'objects' if v[0] == 13 else 'arrays'} held as keys .{key}[i]"
    if t == 13:
        return "object " + text_of(9, v, key)
    if t == 9:
        et, items = v
        if len(items) > 8:
            kind = "strings" if et == 8 else "arrays" if et == 9 else TYPE_NAMES[et] + " values"
            return f"{len(items):,} {kind}"
        return "[" + ", ".join('"' + i + '"' if et == 8 else text_of(et, i) for i in items) + "]"
    return str(v)


def expected_tensor(g, data, name, ne, t):
    """dtype, shape, nbytes and the CRC-32 trove streams (little-endian; blocks as stored)."""
    gname, block, size, dtype = GGML[t]
    shape = list(reversed(ne))
    n = int(np.prod(ne, dtype=np.uint64)) if ne else 1
    nbytes = n // block * size
    if dtype is None:
        dtype = "ggml_" + gname.lower()
        shape = shape or [1]
        shape[-1] = ne[0] // block * size
    return dtype, shape, nbytes


def compare(path):
    """trove's view of `path` against the reader here; returns a row for the table."""
    data = open(path, "rb").read()
    g = read_gguf(data)
    out = probe(path)
    assert "error" not in out, out
    props = out["properties"]
    assert props["version"] == str(g["version"])
    assert props["byteorder"] == ("big" if g["big"] else "little")
    for key, (t, v) in g["kv"].items():
        shown = key
        if key == "general.architecture" and t == 8:
            shown = "architecture"
        if key == "tokenizer.chat_template" and t == 8:
            shown = "chat template"
        assert props[shown] == text_of(t, v, key), key
    assert len(out["tensors"]) == len(g["tensors"])
    by_key = {t["key"]: t for t in out["tensors"]}
    types = set()
    for name, ne, t, offset in g["tensors"]:
        dtype, shape, nbytes = expected_tensor(g, data, name, ne, t)
        got = by_key[name]
        assert (got["dtype"], got["shape"], got["nbytes"]) == (dtype, shape, nbytes), name
        raw = data[g["data_offset"] + offset:g["data_offset"] + offset + nbytes]
        assert len(raw) == nbytes
        gname = GGML[t][0]
        if g["big"] and gname in NUMPY_OF:
            raw = np.frombuffer(raw, dtype=">" + NUMPY_OF[gname]).astype("<" + NUMPY_OF[gname]).tobytes()
        assert got["crc32"] == zlib.crc32(raw), name
        types.add(gname)
    return (g["version"], "draft" if g["draft"] else "big" if g["big"] else "little", len(g["kv"]), len(g["tensors"]),
            ",".join(sorted(types)) or "-")


# ---------------------------------------------------------------------------------------------

def sample_files():
    """The writer's files: every float and integer type, v1-v3, both byte orders, block types."""
    rng = np.random.default_rng(27)
    kvs = [("general.architecture", 8, "llama"), ("general.quantization_version", 4, 2),
           ("llama.context_length", 4, 2048), ("llama.block_count", 4, 2),
           ("general.name", 8, "tiny ünïcode"), ("x.f32", 6, 0.5), ("x.bool", 7, True), ("x.i64", 11, -7),
           ("tokenizer.ggml.tokens", 9, (8, [f"tok{i}" for i in range(100)])),
           ("tokenizer.ggml.scores", 9, (6, [0.25] * 3)),
           ("x.nested", 9, (9, [(4, [1, 2]), (4, [3])])),
           ("tokenizer.chat_template", 8, "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")]
    arrays = {
        "f32": rng.standard_normal((3, 5)).astype("f4"), "f16": rng.standard_normal((4,)).astype("f2"),
        "f64": rng.standard_normal((2, 2, 2)).astype("f8"), "i8": rng.integers(-100, 100, (6,)).astype("i1"),
        "i16": rng.integers(-1000, 1000, (2, 3)).astype("i2"), "i32": rng.integers(-10**6, 10**6, (5,)).astype("i4"),
        "i64": rng.integers(-10**12, 10**12, (1, 3)).astype("i8"),
    }
    files = {}
    for version in (1, 2, 3):
        for big in (False, True):
            tensors = [tensor_of(k, a, big) for k, a in arrays.items()]
            if not big:
                tensors.append(("q8", 8, [64, 2], bytes(rng.integers(0, 256, 4 * 34, dtype=np.uint8))))
                tensors.append(("q4k", 12, [256], bytes(rng.integers(0, 256, 144, dtype=np.uint8))))
            files[f"v{version}_{'be' if big else 'le'}.gguf"] = (write_gguf(kvs, tensors, version, big), arrays)
    files["vocab_only.gguf"] = (write_gguf(kvs, []), {})
    files["align64.gguf"] = (write_gguf(kvs + [("general.alignment", 4, 64)], [tensor_of("f32", arrays["f32"])],
                                        alignment=64), {"f32": arrays["f32"]})
    return files


def test_writer_files_round_trip(tmp_path):
    for name, (data, arrays) in sample_files().items():
        path = tmp_path / name
        path.write_bytes(data)
        compare(path)
        f = trove.open(str(path))
        assert f.format == "gguf"
        for key, a in arrays.items():
            np.testing.assert_array_equal(f.get_tensor(key), a)
            assert f.get_tensor(key).dtype == a.dtype.newbyteorder("=")


def test_info_shows_the_model_first(tmp_path, trove):
    path = tmp_path / "m.gguf"
    path.write_bytes(sample_files()["v3_le.gguf"][0])
    r = trove("info", path)
    assert r.code == 0, r
    text = r.text
    for line in ("architecture", "llama"), ("context length", "2,048"), ("layers", "2"), \
            ("vocabulary size", "100"), ("tokenizer.ggml.tokens", "100 strings"), ("quantization mix", "Q4_K 1 tensor"):
        assert any(line[0] in l and line[1] in l for l in text.splitlines()), (line, text)
    assert "Q8_0 [2, 64]" in text  # a block type's ggml type and shape in values
    r = trove("info", "--json", path)
    j = json.loads(r.out)
    assert j["format"] == "gguf"
    assert j["properties"]["chat template"].startswith("{% for m in messages %}")


# Chat templates in the manner of the common families (written for this test): none is flagged.
ORDINARY_TEMPLATES = [
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token }}{% endif %}{% endfor %}",
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}",
    "{%- set ns = namespace(found_system=false, tools=[]) -%}{%- for m in messages -%}{%- if m.role == 'system' -%}"
    "{%- set ns.found_system = true -%}{%- endif -%}{%- endfor -%}{{ '<start_of_turn>' ~ (ns.found_system | string) }}",
]


def test_ordinary_templates_stay_clean(tmp_path, trove):
    for i, template in enumerate(ORDINARY_TEMPLATES):
        path = tmp_path / f"t{i}.gguf"
        path.write_bytes(write_gguf([("general.architecture", 8, "x"), ("tokenizer.chat_template", 8, template)], []))
        r = trove("scan", "--fail-on", "medium", path)
        assert r.code == 0, (template, r)


def test_verify_and_scan(tmp_path, trove):
    path = tmp_path / "m.gguf"
    path.write_bytes(sample_files()["v3_le.gguf"][0])
    assert trove("verify", path).code == 0
    r = trove("scan", "--fail-on", "high", path)
    assert r.code == 0, r
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(write_gguf([("general.architecture", 8, "x"),
                                ("tokenizer.chat_template", 8, "{{ cycler.__init__.__globals__.os.popen('id').read() }}")], []))
    r = trove("scan", "--fail-on", "high", bad)
    assert r.code == 1, r
    assert "cycler" in r.text and "tokenizer.chat_template" in r.text
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-40])  # the last tensor's data cut short
    r = trove("verify", cut)
    assert r.code == 1 and "lie outside the data section" in r.text, r
    r = trove("info", cut)
    assert r.code == 2 and "lie outside the data section" in r.errtext, r
    pointer = tmp_path / "lfs.gguf"  # a Git LFS pointer saved as the model: told by its name
    pointer.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 4\n")
    r = trove("info", pointer)
    assert r.code == 2 and "Git LFS pointer" in r.errtext, r


def test_convert_float_types_and_refuse_blocks(tmp_path, trove):
    files = sample_files()
    floats = tmp_path / "f.gguf"
    data, arrays = files["align64.gguf"]
    floats.write_bytes(data)
    out = tmp_path / "f.safetensors"
    r = trove("convert", floats, out)
    assert r.code == 0, r
    raw = out.read_bytes()  # safetensors: header length, JSON header, data
    n = struct.unpack_from("<Q", raw)[0]
    entry = json.loads(raw[8:8 + n])["f32"]
    begin, end = entry["data_offsets"]
    assert entry["dtype"] == "F32" and entry["shape"] == list(arrays["f32"].shape)
    np.testing.assert_array_equal(np.frombuffer(raw[8 + n + begin:8 + n + end], "<f4").reshape(entry["shape"]), arrays["f32"])
    npz = tmp_path / "f.npz"
    assert trove("convert", floats, npz).code == 0
    np.testing.assert_array_equal(np.load(npz)["f32"], arrays["f32"])
    mixed = tmp_path / "q.gguf"
    mixed.write_bytes(files["v3_le.gguf"][0])
    r = trove("convert", mixed, tmp_path / "q.safetensors")
    assert r.code != 0 and "quantized" in r.errtext and "ggml_q" in r.errtext, r
    assert not (tmp_path / "q.safetensors").exists()
    r = trove("convert", mixed, tmp_path / "q.pt")
    assert r.code != 0 and "quantized" in r.errtext, r


def test_convert_to_safetensors_keeps_large_tensors_page_offsets(tmp_path, trove):
    """Stored tensors the kernel copies (copy_file_range) go out fastest when they sit at the same
    offset within a page as in their source: the header's space padding is lengthened to that
    (less than a page, a multiple of 8). Small files keep the reference's padding (to 8)."""
    page = os.sysconf("SC_PAGE_SIZE")
    rng = np.random.default_rng(7)
    for rows, large in ((1024, True), (64, False)):  # 2 x 8 MiB of float16, or 2 x 512 KiB
        big = [rng.standard_normal((rows, 4096)).astype("<f2") for _ in range(2)]
        small = np.arange(4, dtype="<f4")  # float32 sorts first in safetensors: the halves follow it
        src = tmp_path / f"m{rows}.gguf"
        data = write_gguf([("general.architecture", 8, "llama")],
                          [tensor_of("a", big[0]), tensor_of("b", big[1]), tensor_of("s", small)])
        src.write_bytes(data)
        out = tmp_path / f"m{rows}.safetensors"
        assert trove("convert", src, out).code == 0
        raw = out.read_bytes()
        n = struct.unpack_from("<Q", raw)[0]
        text = raw[8:8 + n]
        assert n % 8 == 0 and text.startswith(b"{") and set(text[len(text.rstrip(b" ")):]) <= {ord(" ")}
        got = _safetensors(out)
        for name, a in (("a", big[0]), ("b", big[1]), ("s", small)):
            np.testing.assert_array_equal(got[name][1], a)
        header = json.loads(text)
        if large:
            for name, a in (("a", big[0]), ("b", big[1])):
                begin = header[name]["data_offsets"][0]
                assert (8 + n + begin) % page == data.find(a.tobytes()) % page, name
        else:
            assert len(text.rstrip(b" ")) > n - 8  # the reference's padding, byte for byte


# ---------------------------------------------------------------------------------------------
# Dequantization (phase 2): numpy dequantizers written from ggml's block layouts (ggml-common.h:
# QK_K = 256), in float32 with ggml's order of operations, against trove's bit for bit.

def _half(blocks, at):
    return blocks[:, at:at + 2].copy().view("<f2").astype(np.float32)  # (n, 1)


def deq_q4_0(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 18)  # d (f16), qs[16]
    d, qs = _half(b, 0), b[:, 2:].astype(np.int16)
    low, high = ((qs & 0xF) - 8).astype(np.float32), ((qs >> 4) - 8).astype(np.float32)
    return np.concatenate([low * d, high * d], axis=1).reshape(-1)


def deq_q8_0(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 34)  # d (f16), qs[32] (int8)
    return (b[:, 2:].copy().view(np.int8).astype(np.float32) * _half(b, 0)).reshape(-1)


def deq_q4_k(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 144)  # d, dmin (f16), scales[12], qs[128]
    d, dmin, qs = _half(b, 0), _half(b, 2), b[:, 16:]
    sc, mn = _scales_k4(b[:, 4:16])
    out = []
    for j in range(4):  # 64 values: 32 low nibbles, 32 high ones
        q = qs[:, 32 * j:32 * j + 32]
        d1, m1 = d * sc[2 * j], dmin * mn[2 * j]
        d2, m2 = d * sc[2 * j + 1], dmin * mn[2 * j + 1]
        out += [d1 * (q & 0xF) - m1, d2 * (q >> 4) - m2]
    return np.concatenate(out, axis=1).astype(np.float32).reshape(-1)


def deq_q6_k(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 210)  # ql[128], qh[64], scales[16] (int8), d (f16)
    ql, qh, sc, d = b[:, :128], b[:, 128:192], b[:, 192:208].copy().view(np.int8), _half(b, 208)
    out = []
    for n in range(2):  # two halves of 128 values
        l_, h_, s_ = ql[:, 64 * n:64 * n + 64], qh[:, 32 * n:32 * n + 32], sc[:, 8 * n:8 * n + 8]
        idx = np.arange(32) // 16
        q = [((l_[:, :32] & 0xF) | (((h_ >> 0) & 3) << 4)), ((l_[:, 32:] & 0xF) | (((h_ >> 2) & 3) << 4)),
             ((l_[:, :32] >> 4) | (((h_ >> 4) & 3) << 4)), ((l_[:, 32:] >> 4) | (((h_ >> 6) & 3) << 4))]
        for k in range(4):
            out.append((d * s_[:, idx + 2 * k]) * (q[k].astype(np.int16) - 32))
    return np.concatenate(out, axis=1).astype(np.float32).reshape(-1)


F32 = np.float32


def deq_q4_1(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 20)  # d, m (f16), qs[16]
    d, m, qs = _half(b, 0), _half(b, 2), b[:, 4:]
    return np.concatenate([(qs & 0xF).astype(F32) * d + m, (qs >> 4).astype(F32) * d + m], axis=1).reshape(-1)


def _fifth_bits(b, at):
    """Q5_0/Q5_1's qh: bit j of a little-endian u32 is value j's fifth bit, as (n, 16) pairs."""
    qh = b[:, at:at + 4].copy().view("<u4").astype(np.int64)  # (n, 1)
    j = np.arange(16)
    return ((qh >> j) & 1) << 4, ((qh >> (j + 16)) & 1) << 4


def deq_q5_0(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 22)  # d (f16), qh[4], qs[16]
    d, qs = _half(b, 0), b[:, 6:].astype(np.int64)
    h0, h1 = _fifth_bits(b, 2)
    return np.concatenate([(((qs & 0xF) | h0) - 16).astype(F32) * d, (((qs >> 4) | h1) - 16).astype(F32) * d],
                          axis=1).reshape(-1)


def deq_q5_1(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 24)  # d, m (f16), qh[4], qs[16]
    d, m, qs = _half(b, 0), _half(b, 2), b[:, 8:].astype(np.int64)
    h0, h1 = _fifth_bits(b, 4)
    return np.concatenate([((qs & 0xF) | h0).astype(F32) * d + m, ((qs >> 4) | h1).astype(F32) * d + m],
                          axis=1).reshape(-1)


def deq_q2_k(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 84)  # scales[16], qs[64], d, dmin (f16)
    scales, qs, d, dmin = b[:, :16], b[:, 16:80], _half(b, 80), _half(b, 82)
    out, i = [], 0
    for n in range(2):  # 128 values: each 2-bit plane of 32 bytes, 16 values per scale
        q = qs[:, 32 * n:32 * n + 32]
        for shift in (0, 2, 4, 6):
            for half in range(2):
                sc = scales[:, i:i + 1]
                i += 1
                dl, ml = d * (sc & 0xF).astype(F32), dmin * (sc >> 4).astype(F32)
                out.append(dl * ((q[:, 16 * half:16 * half + 16] >> shift) & 3).astype(F32) - ml)
    return np.concatenate(out, axis=1).reshape(-1)


def deq_q3_k(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 110)  # hmask[32], qs[64], scales[12], d (f16)
    hm, qs, s, d = b[:, :32], b[:, 32:96], b[:, 96:108].astype(np.int64), _half(b, 108)
    scale = []
    for j in range(16):  # 6 bits: a nibble, and 2 bits of the last four bytes
        low = s[:, j] & 0xF if j < 8 else s[:, j - 8] >> 4
        high = (s[:, 8 + j % 4] >> (2 * (j // 4))) & 3
        scale.append(((low | (high << 4)) - 32).astype(F32)[:, None])
    out, i, m = [], 0, 1
    for n in range(2):
        q = qs[:, 32 * n:32 * n + 32]
        for shift in (0, 2, 4, 6):
            for half in range(2):
                part = slice(16 * half, 16 * half + 16)
                low = ((q[:, part] >> shift) & 3).astype(np.int64) - np.where(hm[:, part] & m, 0, 4)
                out.append((d * scale[i]) * low.astype(F32))
                i += 1
            m <<= 1
    return np.concatenate(out, axis=1).reshape(-1)


def _scales_k4(s):
    sc, mn = [], []
    for j in range(8):  # 6-bit scale and min of sub-block j (Q4_K, Q5_K)
        if j < 4:
            sc.append(s[:, j] & 63)
            mn.append(s[:, j + 4] & 63)
        else:
            sc.append((s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4))
            mn.append((s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4))
    return [x.astype(F32)[:, None] for x in sc], [x.astype(F32)[:, None] for x in mn]


def deq_q5_k(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 176)  # d, dmin (f16), scales[12], qh[32], qs[128]
    d, dmin, qh, ql = _half(b, 0), _half(b, 2), b[:, 16:48], b[:, 48:]
    sc, mn = _scales_k4(b[:, 4:16])
    out = []
    for j in range(4):
        q = ql[:, 32 * j:32 * j + 32].astype(np.int64)
        lo = (q & 0xF) + np.where(qh & (1 << (2 * j)), 16, 0)
        hi = (q >> 4) + np.where(qh & (2 << (2 * j)), 16, 0)
        out += [(d * sc[2 * j]) * lo.astype(F32) - dmin * mn[2 * j], (d * sc[2 * j + 1]) * hi.astype(F32) - dmin * mn[2 * j + 1]]
    return np.concatenate(out, axis=1).reshape(-1)


def deq_q8_k(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 292)  # d (f32), qs[256] (int8), bsums[16] (int16)
    d = b[:, :4].copy().view("<f4")
    return (d * b[:, 4:260].copy().view(np.int8).astype(F32)).reshape(-1)


# The non-linear 4-bit types' values: format constants of ggml-common.h (kvalues_iq4nl, and
# kvalues_mxfp4: the E2M1 codes doubled), as fixed as the block layouts.
IQ4NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], F32)
MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], F32)


def _nibbles(qs, table):
    """Low nibbles' values, then high nibbles' (32 from 16 bytes), per row of qs."""
    return np.concatenate([table[qs & 0xF], table[qs >> 4]], axis=-1)


def deq_iq4_nl(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 18)  # d (f16), qs[16]
    return (_half(b, 0) * _nibbles(b[:, 2:], IQ4NL_VALUES)).reshape(-1)


def deq_iq4_xs(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 136)  # d (f16), scales_h (u16), scales_l[4], qs[128]
    n = len(b)
    d = _half(b, 0)
    scales_h = b[:, 2:4].copy().view("<u2").astype(np.int32)  # (n, 1)
    ib = np.arange(8)
    low = (b[:, 4 + ib // 2] >> (4 * (ib % 2))) & 0xF  # (n, 8)
    ls = low.astype(np.int32) | (((scales_h >> (2 * ib)) & 3) << 4)
    dl = d * (ls - 32).astype(F32)  # (n, 8)
    values = _nibbles(b[:, 8:].reshape(n, 8, 16), IQ4NL_VALUES)  # (n, 8, 32)
    return (dl[:, :, None] * values).reshape(-1)


def deq_tq1_0(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 54)  # qs[48] (5 trits a byte), qh[4] (4 a byte), d (f16)
    d = _half(b, 52)

    def trits(bytes_, digits):  # digit n of every byte, then digit n + 1: (n_blocks, digits * len)
        pow3 = np.array([1, 3, 9, 27, 81], np.uint16)[:digits]
        q = (bytes_[:, None, :].astype(np.uint16) * pow3[None, :, None]) & 0xFF  # the uint8 product
        return (((q * 3) >> 8).astype(F32) - 1).reshape(len(bytes_), -1)

    t = np.concatenate([trits(b[:, :32], 5), trits(b[:, 32:48], 5), trits(b[:, 48:52], 4)], axis=1)
    return (t * d).reshape(-1)


def deq_tq2_0(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 66)  # qs[64] (2 bits a value), d (f16)
    d = _half(b, 64)
    qs = b[:, :64].reshape(-1, 2, 1, 32)
    q = ((qs >> (2 * np.arange(4)[None, None, :, None])) & 3).astype(F32) - 1  # (n, 2, 4, 32)
    return (q.reshape(len(b), 256) * d).reshape(-1)


def deq_mxfp4(raw):
    b = np.frombuffer(raw, np.uint8).reshape(-1, 17)  # e (E8M0), qs[16]
    e = b[:, 0].astype(np.uint32)
    # 2^(e - 128): half the block's scale (the table is doubled); float32 subnormals for e < 2.
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype("<u4")
    d = bits.view("<f4")[:, None]
    with np.errstate(over="ignore"):  # 12 x 2^127 is inf in float32, in ggml's arithmetic too
        return (_nibbles(b[:, 1:], MXFP4_VALUES) * d).reshape(-1)


# ggml type id: (dequantizer, bytes per block, values per block, fp16 scale offsets, f32 scale offsets)
DEQUANTIZERS = {
    2: (deq_q4_0, 18, 32, [0], []), 3: (deq_q4_1, 20, 32, [0, 2], []), 6: (deq_q5_0, 22, 32, [0], []),
    7: (deq_q5_1, 24, 32, [0, 2], []), 8: (deq_q8_0, 34, 32, [0], []), 10: (deq_q2_k, 84, 256, [80, 82], []),
    11: (deq_q3_k, 110, 256, [108], []), 12: (deq_q4_k, 144, 256, [0, 2], []), 13: (deq_q5_k, 176, 256, [0, 2], []),
    14: (deq_q6_k, 210, 256, [208], []), 15: (deq_q8_k, 292, 256, [], [0]),
    20: (deq_iq4_nl, 18, 32, [0], []), 23: (deq_iq4_xs, 136, 256, [0], []), 34: (deq_tq1_0, 54, 256, [52], []),
    35: (deq_tq2_0, 66, 256, [64], []), 39: (deq_mxfp4, 17, 32, [], []),
}
# Scales at the edges of their formats: fp16's largest, smallest normal and subnormal, zeros of
# both signs; float32's (Q8_K) as large as 127 times still fits.
EXTREME_HALVES = np.array([65504, -65504, 6.1035e-05, 5.96e-08, -5.96e-08, 0.0, -0.0, 1.0], "<f2")
EXTREME_FLOATS = np.array([1e36, -1e36, 1.2e-38, 1e-45, -0.0, 0.0, 1.0], "<f4")


def random_blocks(rng, t, n, extreme=True):
    """n blocks of type t: random quants, finite scales at the layout's places (a third of them
    extreme, with extreme=True)."""
    _, size, _, halves, floats = DEQUANTIZERS[t]
    b = rng.integers(0, 256, (n, size), dtype=np.uint8)
    for at in halves:
        v = rng.uniform(-2, 2, n).astype("<f2")
        if extreme:
            pick = rng.random(n) < 0.34
            v[pick] = rng.choice(EXTREME_HALVES, pick.sum())
        b[:, at:at + 2] = v.view(np.uint8).reshape(n, 2)
    for at in floats:
        v = rng.uniform(-2, 2, n).astype("<f4")
        if extreme:
            pick = rng.random(n) < 0.34
            v[pick] = rng.choice(EXTREME_FLOATS, pick.sum())
        b[:, at:at + 4] = v.view(np.uint8).reshape(n, 4)
    return b.tobytes()


def test_dequantize_matches_ggml_reference_layouts(tmp_path):
    rng = np.random.default_rng(33)
    tensors, reference = [], {}
    for t, (deq, size, block, _, _) in DEQUANTIZERS.items():
        for name, ne in (("row", [block * 3]), ("matrix", [block * 2, 5]), ("cube", [block, 3, 2]), ("many", [block, 40])):
            n = int(np.prod(ne)) // block
            raw = random_blocks(rng, t, n)
            key = f"{GGML[t][0]}.{name}"
            tensors.append((key, t, ne, raw))
            reference[key] = deq(raw)
            assert reference[key].dtype == np.float32 and reference[key].size == int(np.prod(ne))
    path = tmp_path / "q.gguf"
    path.write_bytes(write_gguf([("general.architecture", 8, "x"), ("general.quantization_version", 4, 2)], tensors))
    out = probe_args("dequantize", path)
    got = {t["key"]: t for t in out["tensors"]}
    assert sorted(got) == sorted(reference)
    rows = []
    for key, values in reference.items():
        assert got[key]["values"] == values.size, key
        np.testing.assert_array_equal(np.array(got[key]["first"], F32), values[:8], err_msg=key)
        assert got[key]["crc32"] == zlib.crc32(values.astype("<f4").tobytes()), key
        rows.append((key, values.size, float(np.abs(values).max())))
    print("\n".join(f"{k:16} {n:6} values, max |x| {m:.4g}: bit for bit" for k, n, m in rows))


def test_grid_types_stay_refused_by_name(tmp_path, trove):
    # IQ1_*, IQ2_*, IQ3_* index ggml's lattice grids (thousands of entries): not dequantized, and
    # the message names the type and what is.
    path = tmp_path / "grid.gguf"
    path.write_bytes(write_gguf([("general.architecture", 8, "x")], [("g", 16, [256], bytes(66))]))
    r = trove("convert", path, tmp_path / "g.safetensors", "--dtype", "float32")
    assert r.code != 0 and "ggml_iq2_xxs" in r.errtext and "IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4" in r.errtext, r
    assert not (tmp_path / "g.safetensors").exists()


def _block_model(tmp_path, rng):
    """A file of block types and a float tensor: (path, {key: values as float32, shaped}, {key: raw})."""
    tensors, values, raws = [], {}, {}
    for key, t, ne in (("q4", 2, [64, 3]), ("k6", 14, [256, 2]), ("k3", 11, [256])):
        raw = random_blocks(rng, t, int(np.prod(ne)) // DEQUANTIZERS[t][2], extreme=False)
        tensors.append((key, t, ne, raw))
        values[key] = DEQUANTIZERS[t][0](raw).reshape(ne[::-1])
        raws[key] = raw
    f = np.arange(6, dtype=F32).reshape(2, 3)
    tensors.append(tensor_of("f", f))
    values["f"] = f
    path = tmp_path / "m.gguf"
    path.write_bytes(write_gguf([("general.architecture", 8, "x"), ("general.quantization_version", 4, 2)], tensors))
    return path, values, raws


def test_commands_see_dequantized_values(tmp_path, trove):
    path, values, raws = _block_model(tmp_path, np.random.default_rng(5))
    # cat: the values, in their shape (ne reversed), float32
    r = trove("cat", path, "q4", "--json")
    assert r.code == 0, r
    got = json.loads(r.out)
    assert got["dtype"] == "float32" and got["dequantized_from"] == "ggml_q4_0" and got["shape"] == [3, 64], got
    np.testing.assert_array_equal(np.array(got["data"], F32), values["q4"])
    r = trove("cat", path, "k6")
    assert r.code == 0 and "ggml_q6_k [2, 256]" in r.text and "its values" in r.text, r
    r = trove("cat", path, "q4[1, :]", "--json")  # rows slice; the last axis stays whole
    assert r.code == 0, r
    np.testing.assert_array_equal(np.array(json.loads(r.out)["data"], F32), values["q4"][1])
    r = trove("cat", path, "q4[:, 0:4]")
    assert r.code != 0 and "rows only" in r.errtext, r
    # stats: the values' figures
    r = trove("stats", path, "--json")
    assert r.code == 0, r
    rows = {t["key"]: t for t in json.loads(r.out)["tensors"]}
    for key in ("q4", "k6", "k3"):
        assert rows[key].get("min") == float(values[key].min()) and rows[key].get("max") == float(values[key].max()), rows[key]
        assert rows[key]["shape"] == list(values[key].shape), rows[key]
    # diff: the same blocks are equal; one changed block differs, by its values
    same = tmp_path / "same.gguf"
    same.write_bytes(path.read_bytes())
    r = trove("diff", path, same)
    assert r.code == 0, r
    changed = bytearray(path.read_bytes())
    at = bytes(changed).index(raws["k6"]) + 5  # a quant of the first block
    changed[at] ^= 0x11
    other = tmp_path / "other.gguf"
    other.write_bytes(bytes(changed))
    r = trove("diff", path, other, "--json")
    assert r.code == 1, r
    diffs = {t["key"]: t for t in json.loads(r.out)["tensors"]}
    assert not diffs["k6"]["identical"] and diffs["q4"]["identical"], diffs


def _safetensors(path):
    raw = path.read_bytes()
    n = struct.unpack_from("<Q", raw)[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for key, e in header.items():
        if key == "__metadata__":
            continue
        b, end = e["data_offsets"]
        code = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}[e["dtype"]]
        out[key] = (e["dtype"], np.frombuffer(raw[8 + n + b:8 + n + end], code).reshape(e["shape"]))
    return out


def test_convert_dtype_dequantizes(tmp_path, trove):
    path, values, _ = _block_model(tmp_path, np.random.default_rng(6))
    r = trove("convert", path, tmp_path / "no.safetensors")
    assert r.code != 0 and "'q4' (ggml_q4_0)" in r.errtext and "--dtype float32" in r.errtext, r
    assert not (tmp_path / "no.safetensors").exists()
    out = tmp_path / "m32.safetensors"
    r = trove("convert", path, out, "--dtype", "float32")
    assert r.code == 0, r
    got = _safetensors(out)
    for key, v in values.items():
        assert got[key][0] == "F32", got[key]
        np.testing.assert_array_equal(got[key][1], v, err_msg=key)
    out = tmp_path / "m16.safetensors"
    assert trove("convert", path, out, "--dtype", "float16").code == 0
    got = _safetensors(out)
    for key, v in values.items():  # float32 values rounded once (numpy rounds to nearest even too)
        np.testing.assert_array_equal(got[key][1], v.astype("<f2"), err_msg=key)
    out = tmp_path / "mbf.safetensors"
    assert trove("convert", path, out, "--dtype", "bfloat16").code == 0
    got = _safetensors(out)
    bits = values["k6"].view("<u4")
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")  # round to nearest even (finite values)
    np.testing.assert_array_equal(got["k6"][1], rounded)
    npz = tmp_path / "m.npz"
    assert trove("convert", path, npz, "--dtype", "float32").code == 0
    with np.load(npz) as z:
        for key, v in values.items():
            np.testing.assert_array_equal(z[key], v, err_msg=key)
    pt = tmp_path / "m.pt"
    assert trove("convert", path, pt, "--dtype", "float32").code == 0
    import torch
    loaded = torch.load(pt)
    for key, v in values.items():
        np.testing.assert_array_equal(loaded[key].numpy(), v, err_msg=key)


def test_python_blocks_raw_and_dequantized(tmp_path):
    path, values, raws = _block_model(tmp_path, np.random.default_rng(7))
    with trove.open(path) as f:
        with pytest.raises(trove.UnsupportedError, match="dequantize"):
            f["q4"]
        np.testing.assert_array_equal(f["f"], values["f"])
        d = f.dequantize("q4")
        assert d.dtype == np.float32 and d.shape == (3, 64)
        np.testing.assert_array_equal(d, values["q4"])
        np.testing.assert_array_equal(f.dequantize("k3", "float64"), values["k3"].astype(np.float64))
        with pytest.raises(trove.UnsupportedError):
            f.dequantize("f")
    with trove.open(path, raw=True) as f:
        blocks = f["q4"]  # the blocks as stored, zero-copy: rows of 2 blocks of 18 bytes
        assert blocks.dtype == np.uint8 and blocks.shape == (3, 36) and blocks.tobytes() == raws["q4"]
    with trove.open(path, framework="pt") as f:
        np.testing.assert_array_equal(f.dequantize("k6").numpy(), values["k6"])


def test_convert_dtype_rewrites_general_file_type(tmp_path, trove):
    rng = np.random.default_rng(9)
    q4 = ("q4", 2, [64, 3], random_blocks(rng, 2, 6, extreme=False))
    norm = tensor_of("norm", np.arange(3, dtype=F32))
    ids = tensor_of("ids", np.arange(4, dtype=np.int32))
    kvs = [("general.architecture", 8, "x"), ("general.file_type", 4, 2)]  # 2: MOSTLY_Q4_0
    path = tmp_path / "m.gguf"
    path.write_bytes(write_gguf(kvs, [q4, norm]))

    def file_type(*args):
        out = tmp_path / "out.gguf"
        out.exists() and out.unlink()
        r = trove("convert", path, out, *args)
        assert r.code == 0, r
        return read_gguf(out.read_bytes())["kv"].get("general.file_type")

    assert file_type() == (4, 2)  # the types as they were: kept
    assert file_type("--dtype", "float16") == (4, 1)  # MOSTLY_F16
    assert file_type("--dtype", "bfloat16") == (4, 32)  # MOSTLY_BF16
    assert file_type("--dtype", "float32") == (4, 0)  # ALL_F32
    path.write_bytes(write_gguf(kvs, [q4, norm, ids]))
    assert file_type("--dtype", "float16") is None  # float16 and int32: no one llama_ftype names them


def test_python_dequantize_into_out(tmp_path):
    path, values, _ = _block_model(tmp_path, np.random.default_rng(8))
    with trove.open(path) as f:
        for key, dtype in (("q4", "float32"), ("k6", "float32"), ("k3", "float64"), ("q4", "float16")):
            out = np.full(values[key].shape, np.nan, dtype=dtype)
            got = f.dequantize(key, dtype, out=out)
            assert got is out, key
            np.testing.assert_array_equal(out, values[key].astype(dtype))
        q4 = values["q4"]
        with pytest.raises(trove.UsageError, match="dtype float64; 'q4' dequantized is float32"):
            f.dequantize("q4", out=np.empty(q4.shape, np.float64))
        with pytest.raises(trove.UsageError, match=r"shape \(64, 3\); 'q4' has \(3, 64\)"):
            f.dequantize("q4", out=np.empty((64, 3), np.float32))
        with pytest.raises(trove.UsageError, match="C-contiguous"):
            f.dequantize("q4", out=np.empty((64, 3), np.float32).T)
        ro = np.empty(q4.shape, np.float32)
        ro.setflags(write=False)
        with pytest.raises(trove.UsageError, match="read-only"):
            f.dequantize("q4", out=ro)
        with pytest.raises(trove.UsageError, match="numpy array"):
            f.dequantize("q4", out=[0.0] * q4.size)


# ---------------------------------------------------------------------------------------------
# The GGUF writer (trove convert ... out.gguf), read back by this test's reader and by trove's.

def test_gguf_to_gguf_keeps_every_byte(tmp_path, trove):
    files = sample_files()
    for name in ("v3_le.gguf", "v2_le.gguf", "align64.gguf", "vocab_only.gguf"):
        src = tmp_path / name
        src.write_bytes(files[name][0])
        out = tmp_path / ("copy_" + name)
        r = trove("convert", src, out)
        assert r.code == 0, (name, r)
        data = out.read_bytes()
        g = read_gguf(data)
        assert g["version"] == 3 and not g["big"]
        assert g["kv"] == read_gguf(files[name][0])["kv"], name  # every key, type and value
        if name != "v2_le.gguf":  # the test's writer lays files out as ggml does: the same bytes
            assert data == files[name][0], name
        assert probe(out)["tensors"] == probe(src)["tensors"], name  # dtypes, shapes, CRCs of the bytes
    # A v1 or big-endian source's metadata is not re-encoded: refused, nothing written.
    src = tmp_path / "v1.gguf"
    src.write_bytes(files["v1_le.gguf"][0])
    r = trove("convert", src, tmp_path / "v1_copy.gguf")
    assert r.code != 0 and "version 1" in r.errtext, r
    assert not (tmp_path / "v1_copy.gguf").exists()


def test_gguf_writer_from_safetensors_pt_and_npz(tmp_path, trove):
    import torch
    rng = np.random.default_rng(8)
    arrays = {"w": rng.standard_normal((3, 4, 5)).astype("f4"), "b": rng.standard_normal(7).astype("f2"),
              "ids": rng.integers(-9, 9, (2, 2)).astype("i8"), "s": np.array(2.5, "f8")}
    npz = tmp_path / "a.npz"
    np.savez(npz, **arrays)
    pt = tmp_path / "a.pt"
    torch.save({k: torch.from_numpy(v) for k, v in arrays.items()} | {"bf": torch.arange(4, dtype=torch.bfloat16)}, pt)
    st = tmp_path / "a.safetensors"
    assert trove("convert", pt, st).code == 0
    types = {"w": 0, "b": 1, "ids": 27, "s": 28, "bf": 30}
    for src in (npz, pt, st):
        out = tmp_path / (src.stem + "_" + src.suffix[1:] + ".gguf")
        r = trove("convert", src, out, "--metadata", "general.architecture=tiny")
        assert r.code == 0, (src, r)
        data = out.read_bytes()
        g = read_gguf(data)
        assert g["version"] == 3 and g["kv"] == {"general.architecture": (8, "tiny")}, g["kv"]
        infos = {name: (ne, t, off) for name, ne, t, off in g["tensors"]}
        expected = dict(arrays) | ({"bf": None} if src != npz else {})
        if src == st:  # the tensors in the source's order: safetensors' is its header's
            assert sorted(infos) == sorted(expected)
        else:
            assert list(infos) == list(expected)
        for key, a in expected.items():
            ne, t, off = infos[key]
            assert t == types[key] and off % 32 == 0, (key, t, off)
            if a is None:
                assert ne == [4]
                continue
            assert ne == list(reversed(a.shape)), (key, ne)  # ne: PyTorch's shape reversed
            at = g["data_offset"] + off
            got = np.frombuffer(data[at:at + a.nbytes], a.dtype.newbyteorder("<")).reshape(a.shape)
            np.testing.assert_array_equal(got, a, err_msg=key)
        assert g["data_offset"] % 32 == 0 and len(data) % 32 == 0  # the last tensor padded too
        back = probe(out)  # and trove's own reader
        assert {t["key"]: t["shape"] for t in back["tensors"]} == {k: list(np.shape(a)) if a is not None else [4]
                                                                    for k, a in expected.items()}


def test_gguf_writer_refuses_what_gguf_cannot_hold(tmp_path, trove):
    import torch
    for name, value, says in (("five", torch.zeros(1, 1, 1, 1, 2), "5 dimensions"),
                              ("flags", torch.zeros(3, dtype=torch.bool), "no type for bool"),
                              ("c", torch.zeros(2, dtype=torch.complex64), "no type for complex64"),
                              ("u", torch.zeros(2, dtype=torch.uint8), "no type for uint8"),
                              ("x" * 64, torch.zeros(2), "at most 63 bytes")):
        src = tmp_path / "bad.pt"
        torch.save({name: value, "ok": torch.ones(2)}, src)
        out = tmp_path / "bad.gguf"
        r = trove("convert", src, out)
        assert r.code != 0 and says in r.errtext and name in r.errtext, (name, r)
        assert not out.exists(), name
    src = tmp_path / "values.pt"
    torch.save({"w": torch.ones(2), "epoch": 3}, src)
    r = trove("convert", src, tmp_path / "values.gguf")
    assert r.code != 0 and "'epoch'" in r.errtext, r
    assert trove("convert", src, tmp_path / "values.gguf", "--drop-values").code == 0


def test_gguf_to_gguf_dtype_dequantizes_blocks(tmp_path, trove):
    path, values, _ = _block_model(tmp_path, np.random.default_rng(9))
    out = tmp_path / "f16.gguf"
    r = trove("convert", path, out, "--dtype", "float16")
    assert r.code == 0, r
    data = out.read_bytes()
    g = read_gguf(data)
    assert g["kv"] == read_gguf(path.read_bytes())["kv"]
    for name, ne, t, off in g["tensors"]:
        assert t == 1, name
        at = g["data_offset"] + off
        v = values[name].astype("<f2")
        assert ne == list(reversed(v.shape))
        np.testing.assert_array_equal(np.frombuffer(data[at:at + v.nbytes], "<f2").reshape(v.shape), v, err_msg=name)


def test_gguf_set_and_del_rewrite_the_file(tmp_path, trove):
    files = sample_files()
    path = tmp_path / "m.gguf"
    original = files["v3_le.gguf"][0]
    path.write_bytes(original)
    before = read_gguf(original)
    tensors = probe(path)["tensors"]
    template = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}" * 40  # longer than before
    steps = [(("set", path, "tokenizer.chat_template", template), ("tokenizer.chat_template", (8, template))),
             (("set", path, "llama.context_length", "4096"), ("llama.context_length", (4, 4096))),  # its type kept
             (("set", path, "x.new", "-5", "--type", "i16"), ("x.new", (3, -5))),
             (("set", path, "x.f32", "0.1"), ("x.f32", (6, struct.unpack("<f", struct.pack("<f", 0.1))[0]))),
             (("set", path, "general.alignment", "64", "--type", "u32"), ("general.alignment", (4, 64)))]
    expected = dict(before["kv"])
    for args, (key, value) in steps:
        r = trove("gguf", *args)
        assert r.code == 0, (args, r)
        expected[key] = value
        g = read_gguf(path.read_bytes())
        assert g["kv"] == expected, key
        assert list(g["kv"]) == list(expected), key  # keys keep their places; new ones come last
        assert probe(path)["tensors"] == tensors, key  # every tensor's bytes as they were
    g = read_gguf(path.read_bytes())
    assert all(off % 64 == 0 for _, _, _, off in g["tensors"]) and g["data_offset"] % 64 == 0
    assert trove("gguf", "del", path, "general.alignment").code == 0
    assert trove("gguf", "del", path, "x.new").code == 0
    del expected["general.alignment"], expected["x.new"]
    assert read_gguf(path.read_bytes())["kv"] == expected
    assert probe(path)["tensors"] == tensors
    # Refused edits leave the file as it was, and nothing beside it.
    kept = path.read_bytes()
    for args, says in ((("del", path, "no.such"), "no metadata key 'no.such'"),
                       (("set", path, "llama.block_count", "many"), "not a non-negative integer"),
                       (("set", path, "x.i64", "1", "--type", "complex"), "unknown GGUF type"),
                       (("set", path, "tokenizer.ggml.tokens", "a"), "holds an array"),
                       (("set", path, "general.alignment", "48", "--type", "u32"), "power of two")):
        r = trove("gguf", *args)
        assert r.code == 2 and says in r.errtext, (args, r)
        assert path.read_bytes() == kept, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


def probe_args(*args):
    p = subprocess.run([PROBE, *map(str, args)], capture_output=True, timeout=300)
    assert p.returncode in (0, 1), p
    return json.loads(p.stdout)


def seed_files():
    """The fuzz seeds: small files of the writer (no corpus copies)."""
    files = sample_files()
    seeds = {name: data for name, (data, _) in files.items() if name in ("v1_le.gguf", "v2_be.gguf", "vocab_only.gguf", "align64.gguf")}
    seeds["v3_small.gguf"] = write_gguf([("general.architecture", 8, "x")],
                                        [("q", 2, [32], bytes(18)), ("f", 0, [2, 1], struct.pack("<2f", 1, 2))])
    return seeds


def test_fuzz_seeds_are_the_writers():
    for name, data in seed_files().items():
        with open(os.path.join(SEEDS, name), "rb") as f:
            assert f.read() == data, name
    assert sorted(os.listdir(SEEDS)) == sorted(seed_files())


@pytest.mark.skipif(not CORPUS, reason=NO_CORPUS)
def test_corpus(capsys):
    base = os.path.join(CORPUS, "gguf")
    rows = []
    for root, _, names in sorted(os.walk(base)):
        for name in sorted(names):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, base)
            size = os.path.getsize(path)
            if size < 24:
                out = probe(path)
                assert out["error"]["code"] == "corrupt", out
                assert f"a GGUF file of {size} bytes" in out["error"]["message"], out
                rows.append((rel, size, "-", "-", "-", "-", "-", "refused: " + out["error"]["message"].split(": ", 1)[-1]))
                continue
            row = compare(path)
            # The corpus' chat templates are ordinary ones: scan finds nothing to flag.
            r = run_tool("trove", "scan", "--fail-on", "high", path)
            assert r.code == 0 and "high" not in r.text, r
            rows.append((rel, size) + row + ("ok",))
    assert len(rows) == 11, rows
    with capsys.disabled():
        print()
        print(f"{'file':58} {'bytes':>9} ver  order   kv tensors types / result")
        for rel, size, version, order, kv, tensors, types, result in rows:
            print(f"{rel:58} {size:>9} {version!s:>3}  {order:6} {kv!s:>3} {tensors!s:>7} {types} {result}")


if __name__ == "__main__":
    # python3 test_gguf.py --write-seeds: (re)writes fuzz/corpus/gguf_fuzz from the writer.
    if sys.argv[1:] == ["--write-seeds"]:
        os.makedirs(SEEDS, exist_ok=True)
        for name, data in seed_files().items():
            with open(os.path.join(SEEDS, name), "wb") as f:
                f.write(data)
