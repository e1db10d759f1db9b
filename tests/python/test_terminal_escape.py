"""No byte from a file reaches a terminal raw (issue #25; docs/security.md, "What trove prints").

A generator makes a file of every format trove reads, each with names holding BEL, escape
sequences (OSC set-title, erase line, clear screen), CR, LF, TAB, DEL, the C1 control U+009B
(CSI), U+202E (right-to-left override) and, where the format can hold them, bytes that are not
UTF-8; then every command runs on them. Each output must be plain text (valid UTF-8 without a
control character but trove's own newlines and the tab of tab-separated tables, without C1 or
bidirectional controls), must show each name in the documented escaped form, and a key shown by
`trove info` must name its tensor again when given back to `trove cat` inside bash's $'...'.
--json output must hold the exact names.
"""
import json
import os
import struct
import subprocess
import sys
import zipfile

import pytest
import torch

from conftest import BIN_DIR, run_tool
from ptfiles import encode_component
import safetensors_spec

# Names that would act on a terminal, one per class the rule escapes (str: the formats' text).
HOSTILE = {
    "bel": "bel\x07",
    "title": "t\x1b]0;PWNED-TITLE\x07\x1b[2J",
    "erase": "e\r\x1b[2K",
    "lf": "l\nf",
    "tab": "t\tb",
    "del": "d\x7f",
    "csi": "c\u009b31m",
    "rlo": "r\u202egp.exe",
}
# Bytes that are not UTF-8 (with a control sequence after them), where a format can hold them:
# a zip entry's name, a file's name in a directory.
INVALID = b"bad\xff\xc3\x1b[2J"

PSKD_TYPE = "params m\x1b[2J\u202e\u009b"
SCAN_GLOBAL = ("evil\x1b[2J\u202e", "run\x07\u009b")
SCAN_ENTRY = b"../up\x1b[2J\xff"
SCAN_SIDECAR = INVALID + b".pkl"

BIDI = {0x061C, 0x200E, 0x200F, 0x2028, 0x2029} | set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))


def shown(raw):
    """The documented display rule, written again from docs/security.md: what trove shows for a
    name (bytes or str)."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    out, i = [], 0
    short = {0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r", 0x5C: "\\\\"}
    while i < len(raw):
        for n in (1, 2, 3, 4):
            try:
                ch = raw[i:i + n].decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                continue
            break
        else:
            out.append("\\x%02x" % raw[i])
            i += 1
            continue
        cp = ord(ch)
        if cp in short:
            out.append(short[cp])
        elif cp < 0x20 or cp == 0x7F:
            out.append("\\x%02x" % cp)
        elif 0x80 <= cp <= 0x9F or cp in BIDI or 0xD800 <= cp <= 0xDFFF:
            out.append("\\u%04x" % cp)
        else:
            out.append(ch)
        i += n
    return "".join(out)


def assert_plain(data, what):
    """data (bytes) is text a terminal shows as it is: UTF-8, no control but newline and tab."""
    text = data.decode("utf-8")  # raises on a byte that is not UTF-8
    bad = sorted({hex(ord(c)) for c in text if (ord(c) < 0x20 and c not in "\n\t") or ord(c) == 0x7F
                  or 0x80 <= ord(c) <= 0x9F or ord(c) in BIDI or 0xD800 <= ord(c) <= 0xDFFF})
    assert not bad, f"{what}: raw {bad} in {text[:600]!r}"
    return text


def run(*args, expect=None):
    """Runs trove; its stdout and stderr must be plain text. JSON holds the exact names, with DEL,
    C1 and bidirectional controls (valid raw in JSON strings) written as \\u escapes, so that JSON
    read in a terminal acts on it no more than plain text does."""
    r = run_tool("trove", *args)
    what = "trove " + " ".join(str(a) for a in args[:2])
    assert r.code < 128, (what, r)
    if expect is not None:
        assert r.code in expect, (what, r)
    if "--json" in args:
        for line in r.out.splitlines() if args[0] == "cat" else [r.out]:
            json.loads(line)
    assert_plain(r.out, what + " stdout")
    assert_plain(r.err, what + " stderr")
    return r


def patch_zip_name(path, placeholder, name):
    """Renames an entry to bytes zipfile cannot write (the local and central headers alike)."""
    assert len(placeholder) == len(name)
    data = open(path, "rb").read()
    assert data.count(placeholder) == 2
    open(path, "wb").write(data.replace(placeholder, name))


def key_paths(names):
    return [encode_component(n) for n in names]


def verbatim(name):
    """A name as info shows it: itself, or its key path when it is no UTF-8 text (a surrogate)."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return encode_component(name)


def in_json(name):
    """A name as JSON holds it: exact, but bytes that are not UTF-8 (a surrogate's) as U+FFFD."""
    return name.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def run_bytes(*args):
    """trove with arguments passed as the exact bytes trove's key paths hold (surrogates too)."""
    cmd = [os.path.join(BIN_DIR, "trove").encode()] + [a.encode("utf-8", "surrogatepass") if isinstance(a, str)
                                                       else bytes(a) for a in args]
    return subprocess.run(cmd, capture_output=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("escape")
    made = {}
    tensors = {name: torch.tensor([i], dtype=torch.uint8) for i, name in enumerate(HOSTILE.values())}

    # .pt (zip): the names as keys, a str value with them, a surrogate-escaped key (what Python
    # makes of a byte that is not UTF-8), and a stray entry whose name is not UTF-8.
    obj = dict(tensors)
    obj["s\udcff"] = torch.tensor([9], dtype=torch.uint8)
    obj["value\x1b[2J"] = "v\x07\r\x1b[2K\u202e\u009b"
    torch.save(obj, d / "plain.pt")
    placeholder = b"plain/extra" + b"Q" * (len(INVALID))
    with zipfile.ZipFile(d / "plain.pt") as zin, zipfile.ZipFile(d / "names.pt", "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info.filename))
        zout.writestr(placeholder.decode(), b"stray")
    patch_zip_name(d / "names.pt", placeholder, b"plain/extra" + INVALID)
    made["pt"] = (d / "names.pt", list(obj))

    torch.save(obj, d / "legacy.pt", _use_new_zipfile_serialization=False)
    made["pt-legacy"] = (d / "legacy.pt", list(obj))

    # tensordict directory and .tdz, written by trove from the tensors; the directory also holds
    # a stray file whose name is not UTF-8.
    torch.save(tensors, d / "tensors.pt")
    assert run("convert", d / "tensors.pt", d / "td", "--to", "tensordict").code == 0
    assert run("convert", d / "tensors.pt", d / "names.tdz").code == 0
    open(os.path.join(bytes(d / "td"), INVALID + b".memmap"), "wb").write(b"\0")
    made["tensordict"] = (d / "td", list(tensors))
    made["tdz"] = (d / "names.tdz", list(tensors))

    # .safetensors with the names and __metadata__ holding them.
    st = {name: ("U8", [1], bytes([i])) for i, name in enumerate(HOSTILE.values())}
    (d / "names.safetensors").write_bytes(safetensors_spec.write(st, metadata={"k\x1b[2J": "v\x07\u202e"}))
    made["safetensors"] = (d / "names.safetensors", list(st))

    # A sharded checkpoint whose shard files are named with escapes too.
    shard_dir = d / "sharded"
    shard_dir.mkdir()
    names = list(HOSTILE.values())
    shard_names = ["one\x1b[2J\u202e.safetensors", "two\x07\u009b.safetensors"]
    weight_map = {}
    for s, part in zip(shard_names, (names[:4], names[4:])):
        (shard_dir / s).write_bytes(safetensors_spec.write({n: st[n] for n in part}))
        weight_map.update({n: s for n in part})
    (shard_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": len(names)},
                                                                         "weight_map": weight_map}))
    made["sharded"] = (shard_dir, names)

    # .psk.d: its only text is its type, which the spec refuses with escapes in it (E9001 quotes it).
    type_text = PSKD_TYPE.encode()
    (d / "names.psk.d").write_bytes(b"PSKD" + struct.pack("<HI", 1, len(type_text)) + type_text + struct.pack("<Q", 0))
    made["pskd"] = (d / "names.psk.d", [])

    # What scan and verify report under a name: a torch zip whose pickle calls a global named
    # with escapes and which holds an entry whose name climbs out (and is not UTF-8); a
    # tensordict directory holding a pickled sidecar named so.
    pickle = b"\x80\x02c" + SCAN_GLOBAL[0].encode() + b"\n" + SCAN_GLOBAL[1].encode() + b"\n)R."
    placeholder = b"Q" * len(SCAN_ENTRY)
    with zipfile.ZipFile(d / "plain.pt") as zin, zipfile.ZipFile(d / "scan.pt", "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, pickle if info.filename.endswith("data.pkl") else zin.read(info.filename))
        zout.writestr(placeholder.decode(), b"stray")
    patch_zip_name(d / "scan.pt", placeholder, SCAN_ENTRY)
    made["scan-pt"] = d / "scan.pt"
    with zipfile.ZipFile(d / "plain.pt") as zin, zipfile.ZipFile(d / "global.pt", "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, pickle if info.filename.endswith("data.pkl") else zin.read(info.filename))
    made["global-pt"] = d / "global.pt"
    assert run("convert", d / "tensors.pt", d / "td-scan", "--to", "tensordict").code == 0
    open(os.path.join(bytes(d / "td-scan"), SCAN_SIDECAR), "wb").write(b"\x80\x02N.")
    made["scan-td"] = d / "td-scan"

    # A benign file to diff against: every hostile key is "only in A".
    torch.save({"w": torch.zeros(1)}, d / "benign.pt")
    made["benign"] = (d / "benign.pt", ["w"])
    return made


FORMATS = ["pt", "pt-legacy", "tensordict", "tdz", "safetensors", "sharded", "pskd"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_info_shows_every_name_escaped_and_json_exact(files, fmt):
    path, names = files[fmt]
    if fmt == "pskd":
        r = run("info", path, expect={2})
        assert f"E9001: type '{shown(PSKD_TYPE)}'" in r.errtext, r
        return
    text = run("info", path, expect={0}).text
    for flags in (["--tsv"], ["--records"], ["--depth", "1"], ["--sort", "key"]):
        run("info", path, *flags, expect={0})
    for n in names:
        # The tensors' table shows names verbatim (escaped); the values tree its key paths.
        k = encode_component(n) if "value" in encode_component(n) else verbatim(n)
        assert shown(k) in text, (fmt, k, text)
    info = json.loads(run("info", path, "--json", expect={0}).out)
    assert sorted(t["key"] for t in info["tensors"]) == sorted(in_json(k) for k in key_paths(names) if "value" not in k)
    if fmt == "pt":
        # The entry whose name is not UTF-8 is listed escaped; JSON has U+FFFD for its bad bytes.
        assert shown(b"plain/extra" + INVALID) in text
        assert any(r["name"].startswith("plain/extra") for r in info["records"])
        assert "values" in text and shown("v\x07\r\x1b[2K\u202e\u009b") in text
        assert info["values"]["value\x1b[2J"] == "v\x07\r\x1b[2K\u202e\u009b"
    if fmt == "safetensors":
        assert shown("metadata.k\x1b[2J") in text and shown("v\x07\u202e") in text
        assert info["properties"]["metadata.k\x1b[2J"] == "v\x07\u202e"
    if fmt == "sharded":
        for s in ("one\x1b[2J\u202e.safetensors", "two\x07\u009b.safetensors"):
            assert shown(s) in text
            assert s in [r["name"] for r in info["records"]]


@pytest.mark.parametrize("fmt", ["pt", "pt-legacy", "tensordict", "tdz", "safetensors", "sharded"])
def test_a_key_shown_by_info_names_its_tensor_for_cat(files, fmt):
    path, names = files[fmt]
    rows = run("info", path, "--tsv", expect={0}).text.split("tensors (", 1)[1].split("\nvalues\n")[0]
    shown_keys = [line.split("\t")[0] for line in rows.splitlines()[2:]]
    # info shows each name as the file spells it (a key path only where a name is no UTF-8 text).
    expected = {shown(verbatim(n)): verbatim(n) for n in names if "value" not in encode_component(n)}
    assert sorted(shown_keys) == sorted(expected)
    env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8")
    for key in shown_keys:
        # The shown text inside bash's $'...' spells the key's bytes again (docs/security.md).
        p = subprocess.run(["/bin/bash", "-c", "exec \"$0\" cat --json \"$1\" $'" + key.replace("'", "\\'") + "'",
                            os.path.join(BIN_DIR, "trove"), str(path)], capture_output=True, env=env)
        assert p.returncode == 0, (key, p.stderr)
        assert json.loads(p.stdout)["key"] == in_json(expected[key])
        human = run_bytes("cat", path, expected[key])
        assert human.returncode == 0, human
        assert assert_plain(human.stdout, "cat " + key).startswith(key + ": uint8 [1]"), human


@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_scan_stats_diff_say_nothing_raw(files, fmt):
    path, names = files[fmt]
    for cmd in ("verify", "scan"):
        run(cmd, path, expect={0, 1})
        report = json.loads(run(cmd, path, "--json", expect={0, 1}).out)
        assert report["files"][0]["path"] == str(path)
    if fmt == "pskd":
        return  # a params file has no tensors to compute or compare
    stats = run("stats", path, expect={0}).text
    # stats names tensors as info does: verbatim (escaped), a key path only where a name is no UTF-8 text.
    for n in names:
        if "value" not in encode_component(n):
            assert shown(verbatim(n)) in stats, (fmt, n, stats)
    run("stats", path, "--hist", "4", expect={0})
    tensors = json.loads(run("stats", path, "--json", expect={0}).out)["tensors"]
    assert sorted(t["key"] for t in tensors) == sorted(in_json(k) for k in key_paths(names) if "value" not in k)
    assert sorted(t["name"] for t in tensors) == \
        sorted(in_json(verbatim(n)) for n in names if "value" not in encode_component(n))
    benign = files["benign"][0]
    diff = run("diff", path, benign, expect={1}).text
    for k in key_paths(names):
        if "value" not in k:
            assert "only in A: " + shown(k) + "\n" in diff
    only = json.loads(run("diff", path, benign, "--json", expect={1}).out)["only_in_a"]
    assert sorted(only) == sorted(in_json(k) for k in key_paths(names) if "value" not in k)


def test_scan_and_verify_name_globals_and_entries_escaped(files):
    path = files["scan-pt"]
    text = run("scan", path, expect={1}).text
    dotted = ".".join(SCAN_GLOBAL)
    assert shown(dotted) in text, text
    assert "call: " + shown(dotted) + "()" in text, text
    assert shown(SCAN_ENTRY) in text, text
    report = json.loads(run("scan", path, "--json", expect={1}).out)["files"][0]
    assert dotted in [g["name"] for g in report["globals"]]
    assert SCAN_ENTRY.decode("utf-8", "replace") in [f["entry"] for f in report["findings"]]
    # Reading refuses the entry, and without it the global: each error names it escaped.
    r = run("info", path, expect={2})
    assert f"entry '{shown(SCAN_ENTRY)}'" in r.errtext, r
    run("verify", path, expect={1})
    r = run("info", files["global-pt"], "--strict", expect={2})
    assert f"refused global '{shown(dotted)}'" in r.errtext, r
    # Read by default as an inert object of an unknown class: the warning and the value tree name it.
    r = run("info", files["global-pt"], expect={0})
    assert "read as inert data (nothing run): " + shown(dotted) in r.errtext, r
    assert "<" + shown(dotted) + ">" in r.text, r
    # A pickled sidecar in a tensordict directory, named with bytes that are not UTF-8.
    td = files["scan-td"]
    text = run("scan", td, expect={1}).text
    assert shown(SCAN_SIDECAR) in text, text
    run("verify", td, expect={0, 1})


def test_errors_and_notes_say_nothing_raw(files, tmp_path):
    path = files["pt"][0]
    # A key that is not there: the suggestion and the key list are escaped.
    r = run("cat", path, "t\x1b]0;PWNED-TITLE", expect={2})
    assert f"trove: error: {path}: no key 't\\x1b]0;PWNED-TITLE'" in r.errtext
    r = run("cat", path, "nothing-like-it", expect={2})
    assert shown(encode_component(HOSTILE["rlo"])) in r.errtext
    # A value that .safetensors cannot hold: the error names its key; with --drop-values a note
    # names it, then a key that is not UTF-8 (a surrogate's bytes) is refused by name.
    r = run("convert", path, tmp_path / "out.safetensors", expect={2})
    assert shown(encode_component("value\x1b[2J")) in r.errtext
    r = run("convert", path, tmp_path / "out.safetensors", "--drop-values", expect={2})
    assert "trove: note: " in r.errtext and shown(encode_component("value\x1b[2J")) in r.errtext
    assert encode_component("s\udcff") in r.errtext
    # A tensordict leaf named in meta.json without its file (the red-team case): an error.
    td = tmp_path / "td"
    td.mkdir()
    (td / "meta.json").write_text(json.dumps({"_type": "<class 'tensordict._td.TensorDict'>", "batch_size": [],
                                              "device": None, "x\x1b]0;PWNED-TITLE\x07\x1b[2J":
                                              {"device": "cpu", "shape": [4], "dtype": "torch.uint8"}}))
    for cmd in (["info"], ["cat", "--raw"], ["scan"], ["verify"], ["stats"], ["convert"]):
        args = [td, "x"] if cmd[0] == "cat" else [td, tmp_path / "o.pt"] if cmd[0] == "convert" else [td]
        r = run(*cmd, *args)
        assert r.code != 0 or cmd[0] in ("scan", "verify")


def test_data_info_and_its_errors_say_nothing_raw(files, tmp_path):
    # A type the spec refuses: the E9001 message quotes the type text, escaped.
    bad_type = "(idx[4][a\x1b[2J: 2], R\u202e[1])".encode()
    bad = tmp_path / "bad.psk.d"
    bad.write_bytes(b"PSKD" + struct.pack("<HI", 1, len(bad_type)) + bad_type + struct.pack("<Q", 0))
    for path, text in ((files["pskd"][0], PSKD_TYPE), (bad, bad_type.decode())):
        for cmd in (["trove", "data"], ["presk", "data"]):
            for flags in ([], ["--json"]):
                r = run_tool(*cmd, "info", path, *flags)
                assert r.code == 2, r
                assert_plain(r.out, "data info stdout")
                err = assert_plain(r.err, "data info stderr")
                assert f"error[E9001]: {shown(str(path))}: type '{shown(text)}'" in err, err
    # A file name that is not UTF-8, with escapes after it, in the error that it is missing.
    missing = os.path.join(bytes(tmp_path), INVALID + b".psk.d")
    for tool in ("trove", "presk"):
        r = subprocess.run([os.path.join(BIN_DIR, tool), "data", "info", missing], capture_output=True)
        assert r.returncode == 2
        assert shown(INVALID + b".psk.d") in assert_plain(r.stderr, "data info of a missing file")
    # An unknown command word and option are echoed escaped.
    r = run_tool("presk", "data", "inf\x1b[2J")
    assert r.code == 2 and "'inf\\x1b[2J'" in assert_plain(r.err, "presk data unknown command")


def test_python_exception_text_is_escaped(files, tmp_path):
    build = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    code = ("import sys, trove\n"
            "try:\n"
            "    trove.load(sys.argv[1])\n"
            "except trove.Error as e:\n"
            "    print(str(e)); print(e.message == str(e)); print(e.file == sys.argv[1])\n")
    td = tmp_path / "td\x1b[2J"
    td.mkdir()
    (td / "meta.json").write_text(json.dumps({"_type": "<class 'tensordict._td.TensorDict'>", "batch_size": [],
                                              "device": None, "x\r\x1b[2K\u202e": {"device": "cpu", "shape": [4],
                                                                                   "dtype": "torch.uint8"}}))
    p = subprocess.run([sys.executable, "-c", code, str(td)], capture_output=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(build, "python")))
    out = assert_plain(p.stdout, "python")
    assert p.returncode == 0, p.stderr
    message, same, exact_file = out.splitlines()
    assert shown(str(td)) in message and same == "True" and exact_file == "True"
