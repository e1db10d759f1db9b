"""`trove scan` against the hostile-file classes of docs/security.md's table: each file is flagged
(exit 1 at the default --fail-on), the finding names what is wrong, and nothing in it runs: every
payload would `touch` a marker file, which must never appear (trove info, verify and scan are all
run on each file)."""
import json
import os
import struct
import zipfile

import pytest

from pickles import (BUILD, EMPTY_DICT, MARK, NONE, PROTO2, REDUCE, SETITEMS, STOP, call, dict_of, glob, i,
                     ordered_dict, pickle_of, s, storage, tensor_v2, torch_zip, tup)

PROTO4 = b"\x80\x04"
MEMOIZE, STACK_GLOBAL, BINPUT, BINGET, SHORT_BINUNICODE, POP = b"\x94", b"\x93", b"q", b"h", b"\x8c", b"0"
TD_TYPE = "<class 'tensordict._td.TensorDict'>"
NTD_TYPE = "<class 'tensordict.tensorclass.NonTensorData'>"
F32 = struct.pack("<4f", 1, 2, 3, 4)


def sbu(text):
    b = text.encode()
    return SHORT_BINUNICODE + bytes([len(b)]) + b


def touch(tmp_path):
    marker = str(tmp_path / "EXECUTED")
    return marker, "touch " + marker


def scan(trove, *paths, extra=()):
    r = trove("scan", *paths, "--json", *extra, limit=True)
    assert r.code < 128, f"killed by a signal: {r}"
    assert r.code in (0, 1), r
    j = json.loads(r.out)
    return r, j["files"]


def findings_text(reports):
    return "\n".join(f"{f['severity']} {f['entry']} {f['message']}" for rep in reports for f in rep["findings"])


def assert_flagged(trove, path, marker, *needles, severity=None):
    r, reports = scan(trove, path)
    text = findings_text(reports)
    assert r.code == 1, (r, text)
    for n in needles:
        assert n in text, f"{n!r} not in:\n{text}"
    if severity:
        assert any(f["severity"] == severity for rep in reports for f in rep["findings"]), text
    # Reading it as a user would runs nothing either.
    for cmd in ("info", "verify"):
        rr = trove(cmd, path, limit=True)
        assert rr.code < 128, rr
    assert not os.path.exists(marker), "a payload ran"
    return reports


def torch_file(tmp_path, name="good.pt"):
    pkl = pickle_of(dict_of([(s("w"), tensor_v2(storage("FloatStorage", "0", 4), 0, [4], [1]))]))
    return torch_zip(tmp_path / name, pkl, {"0": F32})


# ---- a clean file is clean ----------------------------------------------------------------------

def test_clean_checkpoint_passes(trove, tmp_path):
    r, reports = scan(trove, torch_file(tmp_path))
    assert r.code == 0, findings_text(reports)
    assert all(g["allowed"] for g in reports[0]["globals"])


# ---- pickle classes -----------------------------------------------------------------------------

def test_memo_confusion_put_vs_memoize(tmp_path, trove):
    # Protocol 4: MEMOIZE fills slot 0 and 1 with harmless names; a BINPUT then overwrites slot 0
    # with "os" and slot 1 with "system". A scanner that tracked MEMOIZE but ignored PUT would
    # resolve STACK_GLOBAL to torch._utils._rebuild_tensor_v2.
    marker, cmd = touch(tmp_path)
    body = (sbu("torch._utils") + MEMOIZE + sbu("_rebuild_tensor_v2") + MEMOIZE + POP + POP +
            sbu("os") + BINPUT + b"\x00" + POP + sbu("system") + BINPUT + b"\x01" + POP +
            BINGET + b"\x00" + BINGET + b"\x01" + STACK_GLOBAL + MARK + s(cmd) + b"t" + REDUCE)
    path = torch_zip(tmp_path / "memo.pt", PROTO4 + body + STOP)
    assert_flagged(trove, path, marker, "os.system", severity="critical")


def test_stack_global_through_memo(tmp_path, trove):
    marker, cmd = touch(tmp_path)
    body = (sbu("posix") + MEMOIZE + sbu("system") + MEMOIZE + POP + POP + EMPTY_DICT + POP +
            BINGET + b"\x00" + BINGET + b"\x01" + STACK_GLOBAL + MARK + s(cmd) + b"t" + REDUCE)
    path = torch_zip(tmp_path / "stack_global.pt", PROTO4 + body + STOP)
    assert_flagged(trove, path, marker, "posix.system", severity="critical")


def test_build_on_allowed_global(tmp_path, trove):
    # modelscan#85: BUILD on an allowed name (here collections.OrderedDict) sets attributes on the
    # class itself; the pickle then fetches it again from the memo and calls it.
    marker, cmd = touch(tmp_path)
    state = dict_of([(s("__reduce__"), glob("os", "system")), (s("cmd"), s(cmd))])
    body = glob("collections", "OrderedDict") + BINPUT + b"\x00" + state + BUILD + POP + BINGET + b"\x00" + tup() + REDUCE
    path = torch_zip(tmp_path / "build.pt", pickle_of(body))
    reports = assert_flagged(trove, path, marker, "BUILD on the global 'collections.OrderedDict'", "os.system")
    assert any(f["severity"] == "high" and "BUILD" in f["message"] for f in reports[0]["findings"])


def test_nested_pickle(tmp_path, trove):
    # modelscan#267: pickle.loads(b"<pickle that runs os.system>") inside a __reduce__.
    marker, cmd = touch(tmp_path)
    inner = pickle_of(call(glob("os", "system"), s(cmd)))
    binbytes = b"B" + struct.pack("<I", len(inner)) + inner
    path = torch_zip(tmp_path / "nested.pt", pickle_of(call(glob("pickle", "loads"), binbytes)))
    reports = assert_flagged(trove, path, marker, "pickle.loads", "nested pickle", "os.system", severity="critical")
    nested = [g for g in reports[0]["globals"] if "nested pickle" in g["entry"]]
    assert [g["name"] for g in nested] == ["os.system"], reports[0]["globals"]


def test_importlib_and_marshal(tmp_path, trove):
    # picklescan PR #74: importlib.import_module + builtins.getattr, and marshal.loads.
    marker, cmd = touch(tmp_path)
    os_mod = call(glob("importlib", "import_module"), s("os"))
    system = call(glob("builtins", "getattr"), os_mod, s("system"))
    code = call(glob("marshal", "loads"), b"C" + bytes([4]) + b"\xe3\x00\x00\x00")
    body = dict_of([(s("a"), call(system, s(cmd))), (s("b"), code)])
    path = torch_zip(tmp_path / "importlib.pt", pickle_of(body))
    assert_flagged(trove, path, marker, "importlib.import_module", "builtins.getattr", "marshal.loads",
                   "not a named global", severity="critical")


def test_legacy_file_globals(tmp_path, trove):
    # The legacy (non-zip) format: a stream of pickles; the first one already runs in torch.load.
    marker, cmd = touch(tmp_path)
    magic = pickle_of(b"\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19")
    path = tmp_path / "legacy.pt"
    path.write_bytes(magic + pickle_of(call(glob("subprocess", "Popen"), s(cmd))))
    assert_flagged(trove, path, marker, "subprocess.Popen", severity="critical")


# ---- zip classes --------------------------------------------------------------------------------

def test_polyglot_pickle_then_zip(tmp_path, trove):
    # "magic bypass": a pickle that torch's legacy loader runs, glued in front of a valid
    # checkpoint zip that zip-based scanners look at instead.
    marker, cmd = touch(tmp_path)
    good = torch_file(tmp_path).read_bytes()
    path = tmp_path / "polyglot.pt"
    path.write_bytes(pickle_of(call(glob("os", "system"), s(cmd))) + good)
    assert_flagged(trove, path, marker, "bare pickle", "polyglot", "os.system", severity="critical")


def test_polyglot_zip_then_pickle(tmp_path, trove):
    marker, cmd = touch(tmp_path)
    path = tmp_path / "tail.pt"
    path.write_bytes(torch_file(tmp_path).read_bytes() + pickle_of(call(glob("os", "system"), s(cmd))))
    assert_flagged(trove, path, marker, "after the end record")


def test_polyglot_pskd_with_zip(tmp_path, trove):
    marker, _ = touch(tmp_path)
    typ = "ℝ[2]".encode()
    pskd = b"PSKD" + struct.pack("<HI", 1, len(typ)) + typ + struct.pack("<Q", 1) + struct.pack("<2d", 1, 2)
    path = tmp_path / "x.psk.d"
    path.write_bytes(pskd + torch_file(tmp_path).read_bytes())
    assert_flagged(trove, path, marker, "polyglot")


def rewrite_local_name(path, old, new):
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x03\x04" + b"", 0)
    while at >= 0:
        name_len = struct.unpack_from("<H", data, at + 26)[0]
        name = bytes(data[at + 30:at + 30 + name_len])
        if name == old:
            data[at + 30:at + 30 + name_len] = new
            break
        at = data.find(b"PK\x03\x04", at + 4)
    path.write_bytes(bytes(data))


def test_local_header_name_disagrees_with_central_directory(tmp_path, trove):
    # picklescan CVE-2025-1944: the scanner reads one name, the loader another.
    marker, cmd = touch(tmp_path)
    path = torch_zip(tmp_path / "names.pt", pickle_of(call(glob("os", "system"), s(cmd))))
    rewrite_local_name(path, b"archive/data.pkl", b"archive/data.pkx")
    # torch reads the entry (it takes only the lengths from the local header): the pickle is scanned
    # as torch reads it, and the disagreement is critical.
    assert_flagged(trove, path, marker, "zip readers disagree", "local header name", "global 'os.system'",
                   severity="critical")


def set_flags(path, entry, local=None, central=None):
    data = bytearray(path.read_bytes())
    for sig, name_at, flags_at, value in ((b"PK\x03\x04", 26, 6, local), (b"PK\x01\x02", 28, 8, central)):
        if value is None:
            continue
        at = data.find(sig)
        while at >= 0:
            name_len = struct.unpack_from("<H", data, at + name_at)[0]
            name_start = at + (30 if sig == b"PK\x03\x04" else 46)
            if bytes(data[name_start:name_start + name_len]) == entry:
                struct.pack_into("<H", data, at + flags_at, value)
            at = data.find(sig, at + 4)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where,flag", [("local", 0x08), ("central", 0x08), ("both", 0x01), ("local", 0x20),
                                        ("central", 0x40)])
def test_flag_tricks(tmp_path, trove, where, flag):
    # picklescan malicious1_0x1/_0x20/_0x40 and data-descriptor bits set on one side only: a tool
    # that trusts one header skips the pickle while another loads it.
    marker, cmd = touch(tmp_path)
    path = torch_zip(tmp_path / "flags.pt", pickle_of(call(glob("os", "system"), s(cmd))))
    set_flags(path, b"archive/data.pkl", local=flag if where in ("local", "both") else None,
              central=flag if where in ("central", "both") else None)
    reports = assert_flagged(trove, path, marker)
    text = findings_text(reports)
    # Either the container or the entry is refused outright, or it is read and the global is reported.
    assert "zip container refused" in text or "zip entry refused" in text or "os.system" in text, text


def test_duplicate_names(tmp_path, trove):
    marker, cmd = touch(tmp_path)
    path = tmp_path / "dup.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle_of(dict_of([])))
        with pytest.warns(UserWarning):
            z.writestr("archive/data.pkl", pickle_of(call(glob("os", "system"), s(cmd))))
        z.writestr("archive/version", b"3\n")
    # Both copies are scanned: Python's zipfile opens the last, torch whichever its search meets.
    reports = assert_flagged(trove, path, marker, "zip readers disagree", "duplicate entry name", severity="critical")
    assert any(g["name"] == "os.system" for g in reports[0]["globals"])


# ---- tensordict directories and archives --------------------------------------------------------

def td_dir(tmp_path, name="td"):
    d = tmp_path / name
    d.mkdir()
    meta = {"a": {"device": "cpu", "shape": [4], "dtype": "torch.float32", "is_nested": False},
            "shape": [], "device": "cpu", "_type": TD_TYPE}
    (d / "meta.json").write_text(json.dumps(meta))
    (d / "a.memmap").write_bytes(F32)
    return d


def test_clean_tensordict_dir_passes(trove, tmp_path):
    r, reports = scan(trove, td_dir(tmp_path))
    assert r.code == 0, findings_text(reports)
    assert reports[0]["format"] == "tensordict"


def test_pickled_sidecar_in_directory(tmp_path, trove):
    marker, cmd = touch(tmp_path)
    d = tmp_path / "ntd"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"_type": NTD_TYPE, "_is_non_tensor": True}))
    (d / "other.pickle").write_bytes(pickle_of(dict_of([(s("data"), call(glob("os", "system"), s(cmd)))])))
    reports = assert_flagged(trove, d, marker, "pickled sidecar", "os.system", severity="critical")
    assert any(g["entry"] == "other.pickle" and g["name"] == "os.system" for g in reports[0]["globals"])


def test_benign_sidecar_is_still_a_finding(tmp_path, trove):
    d = td_dir(tmp_path)
    (d / "pickle.pkl").write_bytes(pickle_of(dict_of([(s("x"), i(1))])))
    r, reports = scan(trove, d)
    assert r.code == 1
    assert "pickled sidecar" in findings_text(reports)
    r, _ = scan(trove, d, extra=("--fail-on", "high"))
    assert r.code == 0


@pytest.mark.parametrize("target,severity", [("a.memmap", "high"), ("/etc/passwd", "critical"),
                                             ("../outside.memmap", "critical")])
def test_symlink_in_directory(tmp_path, trove, target, severity):
    marker, _ = touch(tmp_path)
    d = td_dir(tmp_path)
    (tmp_path / "outside.memmap").write_bytes(F32)
    os.symlink(target, d / "b.memmap")
    reports = assert_flagged(trove, d, marker, "symlink to", severity=severity)
    assert any(f["entry"] == "b.memmap" for f in reports[0]["findings"])


def tdz(tmp_path, name, extra):
    path = tmp_path / name
    meta = {"a": {"device": "cpu", "shape": [4], "dtype": "torch.float32", "is_nested": False},
            "shape": [], "device": "cpu", "_type": TD_TYPE}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("meta.json", json.dumps(meta))
        z.writestr("a.memmap", F32)
        for n, data in extra.items():
            z.writestr(n, data)
    return path


def test_pickled_sidecar_in_archive(tmp_path, trove):
    marker, cmd = touch(tmp_path)
    path = tdz(tmp_path, "side.tdz", {"sub/other.pickle": pickle_of(call(glob("os", "system"), s(cmd)))})
    assert_flagged(trove, path, marker, "pickled sidecar", "os.system", severity="critical")


@pytest.mark.parametrize("name", ["../evil.memmap", "/abs/evil.memmap", "sub/../../evil.memmap"])
def test_path_tricks_in_archive(tmp_path, trove, name):
    marker, _ = touch(tmp_path)
    path = tdz(tmp_path, "slip.tdz", {name: b"x"})
    # The entry is refused (the rest of the archive is still scanned).
    assert_flagged(trove, path, marker, "zip entry refused", "refused name", severity="high")
    # unpack refuses too, and writes nothing outside.
    r = trove("unpack", path, tmp_path / "out", limit=True)
    assert r.code == 2, r
    assert not (tmp_path / "evil.memmap").exists()


# ---- .psk.d -------------------------------------------------------------------------------------

def test_pskd_structural_problem(tmp_path, trove):
    typ = "ℝ[2]".encode()
    path = tmp_path / "short.psk.d"
    path.write_bytes(b"PSKD" + struct.pack("<HI", 1, len(typ)) + typ + struct.pack("<Q", 3) + struct.pack("<2d", 1, 2))
    r, reports = scan(trove, path)
    assert r.code == 1
    assert reports[0]["format"] == "pskd"
    assert "E9003" in findings_text(reports)


# ---- the command itself -------------------------------------------------------------------------

def test_many_paths_and_fail_on(tmp_path, trove):
    marker, cmd = touch(tmp_path)
    good = torch_file(tmp_path)
    bad = torch_zip(tmp_path / "bad.pt", pickle_of(call(glob("os", "system"), s(cmd))))
    r, reports = scan(trove, good, bad)
    assert r.code == 1 and len(reports) == 2
    assert [rep["path"] for rep in reports] == [str(good), str(bad)]
    r = trove("scan", good, bad, "--fail-on", "critical", limit=True)
    assert r.code == 1 and "critical" in r.text
    r = trove("scan", good, limit=True)
    assert r.code == 0 and "0 outside the allowlist" in r.text
    r = trove("scan", tmp_path / "missing.pt", limit=True)
    assert r.code == 2 and r.errtext.startswith("trove: error: ")
    assert not os.path.exists(marker)


# ---- a bare pickle of any protocol --------------------------------------------------------------

@pytest.mark.parametrize("protocol", [0, 1])
def test_bare_pickle_of_protocol_0_and_1_is_scanned(tmp_path, trove, protocol):
    """pickle.load (and torch.load's legacy path) runs a file's first pickle whatever its protocol;
    protocols 0 and 1 have no PROTO opcode to be told by, so scan reads the opening by structure."""
    marker = tmp_path / "ran"
    payload = f"touch {marker}"
    if protocol == 0:
        body = b"cos\nsystem\n(S'" + payload.encode() + b"'\ntR."
    else:  # protocol 1: binary strings, an empty tuple then the argument
        arg = payload.encode()
        body = b"cos\nsystem\nq\x00(U" + bytes([len(arg)]) + arg + b"tR."
    path = tmp_path / f"p{protocol}.pkl"
    path.write_bytes(body)
    assert_flagged(trove, path, marker, "bare pickle", "os.system", severity="critical")
    # A clean pickle of the same protocols is still called a pickle (high: pickle.load runs it).
    clean = tmp_path / f"clean{protocol}.pkl"
    import pickle as stdlib_pickle
    clean.write_bytes(stdlib_pickle.dumps({"a": [1, 2.5, "x"]}, protocol=protocol))
    r, reports = scan(trove, clean)
    assert "bare pickle" in findings_text(reports) and r.code == 1
    # Text is not a pickle.
    text = tmp_path / "notes.txt"
    text.write_text("Listing of things\n(1) first\n")
    assert trove("scan", text).code == 2
