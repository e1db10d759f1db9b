"""`trove scan` sees the archive torch reads: differential tests with torch's own zip reader
(`torch._C.PyTorchFileReader`, which reads records and never unpickles) and Python's zipfile as
oracles. For every case and mutation: every global of every pickle torch would open is in the
scan's report, and wherever torch, zipfile and trove see different records or bytes, the scan has a
critical "zip readers disagree" finding and `trove info` (without --permissive) refuses the file.
torch.load is never called on these files.
"""
import os
import struct
import subprocess
import tarfile
import zlib

import pytest

import zipcases as zc
from conftest import BIN_DIR
from pickles import call, dict_of, glob, pickle_of, s


def disagreements(report):
    return [f for f in report["findings"] if f["severity"] == "critical" and "zip readers disagree" in f["message"]]


def top_folder(names):
    return names[0].split("/", 1)[0] if names and "/" in names[0] else ""


def check_parity(path, expect_disagreement=None):
    """The parity rule; returns the scan report."""
    code, report = zc.scan_report(path)
    disagree = disagreements(report)
    seen = {g["name"] for g in report["globals"]}
    tv, zv, rv = zc.torch_view(path), zc.zipfile_view(path), zc.trove_view(path)
    # Every pickle torch would open (by any name it answers to) is scanned: its globals are listed.
    for name, data in (tv or {}).items():
        if zc.looks_like_pickle(data):
            missing = zc.pickle_globals(data) - seen
            assert not missing or disagree, f"{path}: torch's '{name}' names {missing}, unseen by scan: {report}"
    # What zipfile lists is scanned too, or the disagreement is reported.
    for name, data in (zv or []):
        if zc.looks_like_pickle(data):
            assert zc.pickle_globals(data) <= seen or disagree, f"{path}: zipfile's '{name}' unseen: {report}"
    if not disagree and tv is not None and rv is not None:
        # Same records, same bytes: torch's (every name it lists), trove's and zipfile's.
        prefix = top_folder(list(rv))
        for name in set(tv) - {"data.pkl", "version"} | ({"data.pkl", "version"} & set(tv)):
            full = f"{prefix}/{name}"
            matches = [n for n in rv if n.lower() == full.lower()]
            assert len(matches) == 1, f"{path}: torch's '{name}' is {matches} in trove's view"
            assert rv[matches[0]] == tv[name], f"{path}: torch's '{name}' differs from trove's"
        if zv is not None:
            assert len(zv) == len(rv) and dict(zv) == rv, f"{path}: zipfile's view differs from trove's"
        else:
            assert code == 1, f"{path}: zipfile cannot read it, and scan is clean"
    if disagree:
        r = subprocess.run([f"{BIN_DIR}/trove", "info", str(path)], capture_output=True, timeout=60)
        assert r.returncode == 2 and b"error" in r.stderr, (path, r.returncode, r.stderr)
        assert code == 1
    if expect_disagreement is not None:
        assert bool(disagree) == expect_disagreement, (path, report["findings"])
    return report


@pytest.mark.parametrize("name", sorted(zc.CASES))
def test_case(tmp_path, name):
    build, expect = zc.CASES[name]
    path = tmp_path / f"{name}.pt"
    path.write_bytes(build())
    report = check_parity(path, expect)
    if name.startswith("clean") or name == "prepended_adjusted":
        assert report["globals"] == []
    else:
        assert "posix.system" in {g["name"] for g in report["globals"]}, report


# The three reports of the issue: each file was scanned clean (or medium) and torch ran it.

def test_issue_case_insensitive_names(tmp_path):
    path = tmp_path / "case.pt"
    path.write_bytes(zc.case_case_variant())
    report = check_parity(path, True)
    assert any("differs only in case" in f["message"] for f in disagreements(report))
    v = subprocess.run([f"{BIN_DIR}/trove", "verify", str(path)], capture_output=True, timeout=60)
    assert v.returncode != 0, "verify said ok"


def test_issue_end_record_in_comment(tmp_path):
    # Only the benign record's comment reaches the end of the file (trove used to take that one).
    path = tmp_path / "comment.pt"
    path.write_bytes(zc.case_end_record_in_padded_comment())
    tv = zc.torch_view(path)
    assert zc.pickle_globals(tv["data.pkl"]) == {"posix.system"}, "the oracle reads the hidden archive"
    report = check_parity(path, True)
    assert any(f["severity"] == "critical" and f["entry"] == "archive/data.pkl" and "posix.system" in f["message"]
               for f in report["findings"]), report


def test_issue_zip64_extensible_data(tmp_path):
    path = tmp_path / "z64.pt"
    path.write_bytes(zc.case_zip64_extensible_data())
    tv, zv = zc.torch_view(path), dict(zc.zipfile_view(path))
    assert zc.pickle_globals(tv["data.pkl"]) == {"posix.system"}, "torch follows the locator to the hostile directory"
    # Python's zipfile looked for the zip64 end record right before the locator, and so read the
    # benign directory, until the fix of CVE-2025-8291 (Debian's python3.11 3.11.2-6+deb12u7): since,
    # it follows the locator as torch does. Both are in use, so trove must flag the file either way.
    if zv["archive/data.pkl"] != tv["data.pkl"]:
        assert zv["archive/data.pkl"] == zc.BENIGN, "this zipfile reads the benign directory in the extensible data"
    report = check_parity(path, True)
    assert any("extensible data" in f["message"] for f in disagreements(report))
    v = subprocess.run([f"{BIN_DIR}/trove", "verify", str(path)], capture_output=True, timeout=60)
    assert v.returncode != 0, "verify said ok"


# ---- mutations ----------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["archive/DATA.pkl", "archive/data.PKL", "ARCHIVE/data.pkl", "Archive/Data.Pkl",
                                     "archive/DaTa.pKl"])
def test_case_variants_of_data_pkl(tmp_path, variant):
    path = tmp_path / "v.pt"
    path.write_bytes(zc.plain(zc.torch_like([("archive/data.pkl", zc.BENIGN), (variant, zc.hostile()),
                                             ("archive/version", b"3\n")])))
    report = check_parity(path, True)
    assert "posix.system" in {g["name"] for g in report["globals"]}


@pytest.mark.parametrize("variant", ["archive/VERSION", "archive/Data/0", "archive/BYTEORDER"])
def test_case_variants_of_other_records(tmp_path, variant):
    # Two spellings of a record torch opens by name: torch may read either, so they disagree.
    path = tmp_path / "v.pt"
    lower = variant.lower()
    path.write_bytes(zc.plain(zc.torch_like([("archive/data.pkl", zc.BENIGN), (lower, b"3\n"), (variant, b"1\n"),
                                             ("archive/version", b"3\n")] if lower != "archive/version" else
                                            [("archive/data.pkl", zc.BENIGN), (lower, b"3\n"), (variant, b"1\n")])))
    check_parity(path, True)


def test_several_end_records_trailing(tmp_path):
    # A complete benign archive followed by a second end record pointing at a hostile directory:
    # every reader takes the last record, and the scan sees the hostile pickle.
    z = zc.Zip()
    z.add("archive/data.pkl", zc.BENIGN).add("archive/version", b"3\n")
    z.add("archive/data.pkl", zc.hostile()).add("archive/version", b"3\n")
    benign_cd = zc.Zip.central(zc._subset(z, [0, 1]))
    hostile_cd = zc.Zip.central(zc._subset(z, [2, 3]))
    body = bytes(z.body)
    data = (body + benign_cd + hostile_cd + zc.end_record(2, len(benign_cd), len(body)) +
            zc.end_record(2, len(hostile_cd), len(body) + len(benign_cd)))
    path = tmp_path / "two.pt"
    path.write_bytes(data)
    report = check_parity(path)
    assert "posix.system" in {g["name"] for g in report["globals"]}


def test_comment_holding_zip_records_without_end_record(tmp_path):
    # Local headers and a directory inside the comment, but no end record: nobody reads them.
    inner = zc.plain(zc.torch_like([("archive/data.pkl", zc.hostile())]))
    inner = inner[:inner.rfind(struct.pack("<I", zc.END_SIG))]
    path = tmp_path / "c.pt"
    path.write_bytes(zc.plain(zc.torch_like([("archive/data.pkl", zc.BENIGN), ("archive/version", b"3\n")]),
                              comment=inner))
    check_parity(path, False)


def test_comment_holding_whole_zip_with_relative_offsets(tmp_path):
    # The hidden archive's offsets are relative to its own start: torch reads garbage there and
    # fails, zipfile too; the scan still reports two end records.
    inner = zc.plain(zc.torch_like([("archive/data.pkl", zc.hostile()), ("archive/version", b"3\n")]))
    path = tmp_path / "c.pt"
    path.write_bytes(zc.plain(zc.torch_like([("archive/data.pkl", zc.BENIGN), ("archive/version", b"3\n")]),
                              comment=inner))
    check_parity(path, True)


@pytest.mark.parametrize("field", ["method", "sizes", "crc"])
def test_local_header_differs_from_central_directory(tmp_path, field):
    data = bytearray(zc.plain(zc.torch_like([("archive/data.pkl", zc.hostile()), ("archive/version", b"3\n")])))
    if field == "method":
        struct.pack_into("<H", data, 8, 8)
    elif field == "sizes":
        struct.pack_into("<II", data, 18, 5, 5)
    else:
        struct.pack_into("<I", data, 14, 0x12345678)
    path = tmp_path / "l.pt"
    path.write_bytes(bytes(data))
    check_parity(path, True)


def test_gap_between_central_directory_and_end_record(tmp_path):
    z = zc.torch_like([("archive/data.pkl", zc.hostile()), ("archive/version", b"3\n")])
    cd = z.central()
    path = tmp_path / "gap.pt"
    path.write_bytes(bytes(z.body) + cd + b"\0" * 16 + zc.end_record(2, len(cd), len(z.body)))
    check_parity(path, True)


def test_duplicate_of_storage_record(tmp_path):
    z = zc.torch_like([("archive/data.pkl", zc.BENIGN), ("archive/data/0", b"\0" * 8), ("archive/data/0", b"\1" * 8),
                       ("archive/version", b"3\n")])
    path = tmp_path / "d.pt"
    path.write_bytes(zc.plain(z))
    check_parity(path, True)


# ---- real torch files and their mutations -------------------------------------------------------

def saved(tmp_path, name="real.pt"):
    import torch
    path = tmp_path / name
    torch.save({"w": torch.arange(6.0)}, path)
    return path


def test_real_checkpoint_agrees(tmp_path):
    check_parity(saved(tmp_path), False)


def test_real_checkpoint_with_case_variant_appended(tmp_path):
    # A torch.save file rewritten by zipfile with a hostile upper-case twin of data.pkl.
    import zipfile
    src = saved(tmp_path)
    dst = tmp_path / "twin.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
        prefix = zin.namelist()[0].split("/")[0]
        zout.writestr(f"{prefix}/DATA.PKL", zc.hostile())
    report = check_parity(dst, True)
    assert "posix.system" in {g["name"] for g in report["globals"]}


def test_torchscript_records_are_scanned(tmp_path):
    # torch.jit.save's archive with a hostile pickle under a name that is not *.pkl: the scan
    # checks every TorchScript record that starts like a pickle.
    import torch
    import zipfile
    m = torch.jit.script(torch.nn.Linear(2, 2))
    src = tmp_path / "m.pt"
    torch.jit.save(m, str(src), _extra_files={"notes.txt": b"hello"})
    dst = tmp_path / "m2.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        names = zin.namelist()
        for n in names:
            zout.writestr(n, zc.hostile("subprocess", "call") if n.endswith("extra/notes.txt") else zin.read(n))
    code, report = zc.scan_report(dst)
    seen = {(g["entry"].split("/", 1)[1], g["name"]) for g in report["globals"]}
    assert ("extra/notes.txt", "subprocess.call") in seen, report
    assert any(e.endswith("constants.pkl") for e, _ in seen) or any(
        g["entry"].endswith("data.pkl") for g in report["globals"]), report
    check_parity(dst, False)


def test_torch_package_resources_are_scanned(tmp_path):
    from torch.package import PackageExporter
    import zipfile
    src = tmp_path / "p.pt"
    with PackageExporter(str(src)) as e:
        e.save_pickle("res", "thing.bin", {"a": 1})
    dst = tmp_path / "p2.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for n in zin.namelist():
            zout.writestr(n, zc.hostile("os", "execv") if n.endswith("res/thing.bin") else zin.read(n))
    code, report = zc.scan_report(dst)
    assert code == 1
    assert any(g["name"] == "os.execv" and g["entry"].endswith("res/thing.bin") for g in report["globals"]), report


# ---- legacy tar checkpoints: torch.load extracts them with tarfile and runs their pickles ------------

def tar_globals(path):
    code, report = zc.scan_report(path)
    assert code == 1
    return report, {(g["entry"], g["name"]) for g in report["globals"]}


@pytest.mark.parametrize("member", ["storages", "tensors", "pickle", "sys_info"])
def test_legacy_tar_member_pickles_are_scanned(tmp_path, member):
    evil = zc.hostile("posix", "system")
    if member == "storages":
        m = zc.legacy_members(storages=evil + zc.storage_record("0") + pickle_of(b"]"))
    elif member == "tensors":
        m = zc.legacy_members(tensors=evil)
    elif member == "pickle":
        m = zc.legacy_members(main=evil)
    else:
        m = [("sys_info", evil)] + zc.legacy_members()[1:]
    path = tmp_path / "legacy.tar"
    path.write_bytes(zc.legacy_tar(m))
    with tarfile.open(path) as t:  # the peer torch.load uses accepts it
        assert member in t.getnames()
    report, seen = tar_globals(path)
    assert (member, "posix.system") in seen, report
    assert any(f["severity"] == "critical" for f in report["findings"])


def test_legacy_tar_pickles_after_storage_bytes(tmp_path):
    # The storage views pickle comes after two storages' raw bytes; the records' pickles between.
    storages = (pickle_of(b"K\x02") + zc.storage_record("0", "DoubleStorage", 3) +
                pickle_of(b"(" + s("1") + s("cpu") + glob("torch", "HalfStorage") + b"t") + struct.pack("<q", 5) +
                b"\0" * 10 + zc.hostile("subprocess", "Popen"))
    # The second tensor's record is the hostile pickle: torch runs it to read the record.
    tensors = (pickle_of(b"K\x02") + pickle_of(b"(" + s("t") + s("0") + glob("torch", "FloatTensor") + b"t") +
               struct.pack("<ii", 2, 0) + struct.pack("<qqqq", 1, 3, 3, 1) + struct.pack("<q", 0) +
               zc.hostile("os", "popen"))
    path = tmp_path / "legacy.tar"
    path.write_bytes(zc.legacy_tar(zc.legacy_members(storages=storages, tensors=tensors)))
    report, seen = tar_globals(path)
    assert ("storages", "subprocess.Popen") in seen, report
    assert ("tensors", "os.popen") in seen, report


def test_legacy_tar_v7_header_without_magic(tmp_path):
    # tarfile accepts a header by its checksum alone: no "ustar" magic needed.
    path = tmp_path / "v7.tar"
    path.write_bytes(zc.legacy_tar(zc.legacy_members(main=zc.hostile()), fmt=tarfile.GNU_FORMAT))
    data = bytearray(path.read_bytes())
    data[257:265] = b"\0" * 8  # clear the magic and version, then fix the checksum
    data[148:156] = b" " * 8
    chk = sum(data[:512])
    data[148:156] = b"%06o\0 " % chk
    path.write_bytes(bytes(data))
    with tarfile.open(path) as t:
        assert "pickle" in t.getnames()
    report, seen = tar_globals(path)
    assert ("pickle", "posix.system") in seen, report


def test_legacy_tar_pax_renamed_member(tmp_path):
    # A pax header renames the member: tarfile (and torch.load) see `pickle`.
    out = zc.legacy_tar([("sys_info", pickle_of(dict_of([])))], fmt=tarfile.PAX_FORMAT)
    import io
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in zc.legacy_members()[:1] + zc.legacy_members()[2:]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        evil = zc.hostile("pty", "spawn")
        info = tarfile.TarInfo("harmless")
        info.size = len(evil)
        info.pax_headers = {"path": "pickle"}
        t.addfile(info, io.BytesIO(evil))
    path = tmp_path / "pax.tar"
    path.write_bytes(buf.getvalue())
    with tarfile.open(path) as t:
        assert "pickle" in t.getnames()
    report, seen = tar_globals(path)
    assert ("pickle", "pty.spawn") in seen, report


def test_legacy_tar_duplicate_member(tmp_path):
    members = zc.legacy_members() + [("pickle", zc.hostile())]
    path = tmp_path / "dup.tar"
    path.write_bytes(zc.legacy_tar(members))
    report, seen = tar_globals(path)
    assert any("appears 2 times" in f["message"] and f["severity"] == "critical" for f in report["findings"]), report
    assert any(name == "posix.system" for _, name in seen)


def test_clean_legacy_tar_is_medium_only(tmp_path):
    path = tmp_path / "clean.tar"
    path.write_bytes(zc.legacy_tar(zc.legacy_members()))
    code, report = zc.scan_report(path)
    assert code == 1
    assert all(f["severity"] in ("medium", "info") for f in report["findings"]), report
    assert any("tar checkpoint" in f["message"] for f in report["findings"])


@pytest.mark.parametrize("trick", ["dotdot", "encrypted", "method"])
def test_refused_side_entry_does_not_hide_the_pickle(tmp_path, trick):
    # An entry trove refuses on its own beside a hostile data.pkl that torch opens all the same:
    # the scan reports the refused entry and still scans data.pkl (--fail-on critical fails it).
    z = zc.Zip()
    z.add("archive/data.pkl", zc.hostile()).add("archive/version", b"3\n")
    z.add("archive/../junk" if trick == "dotdot" else "archive/junk", b"junk")
    data = bytearray(zc.plain(z))
    if trick != "dotdot":
        cd = data.rfind(b"PK\x01\x02")  # the last directory entry is the junk one
        if trick == "encrypted":
            struct.pack_into("<H", data, cd + 8, 1)
        else:
            struct.pack_into("<H", data, cd + 10, 99)
    path = tmp_path / "side.pt"
    path.write_bytes(bytes(data))
    assert zc.pickle_globals(zc.torch_view(path)["data.pkl"]) == {"posix.system"}
    code, report = zc.scan_report(path)
    assert any("zip entry refused" in f["message"] for f in report["findings"]), report
    assert "posix.system" in {g["name"] for g in report["globals"]}, report
    p = subprocess.run([f"{BIN_DIR}/trove", "scan", "--fail-on", "critical", str(path)], capture_output=True, timeout=60)
    assert p.returncode == 1, p
