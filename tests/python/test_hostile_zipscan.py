"""The hostile-and-careless suite for zip parity and legacy tar scanning (run_hostile: exit < 128,
20 s, 1 GiB, nothing outside the outputs touched, no temporary left).

Archives that torch's reader and Python's zipfile read differently are reported by `scan`
(exit 1, critical), refused by `info`, `cat`, `convert` and `verify` (exit 2 or findings), and
read as torch reads them by `info --permissive`. Legacy tar checkpoints are scanned, never read.
"""
import struct
import tarfile

import pytest

import zipcases as zc
from hostile import run_hostile
from pickles import pickle_of

DISAGREEING = sorted(n for n, (_, expect) in zc.CASES.items() if expect)


@pytest.mark.parametrize("name", DISAGREEING)
def test_disagreeing_archive_every_command(tmp_path, name):
    path = tmp_path / f"{name}.pt"
    path.write_bytes(zc.CASES[name][0]())
    r = run_hostile("trove", "scan", path, watch=tmp_path, expect={1})
    assert "critical" in r.text and "zip readers disagree" in r.text, r
    for cmd in (("info", path), ("cat", path, "w"), ("convert", path, tmp_path / "out.tdz")):
        r = run_hostile("trove", *cmd, watch=tmp_path, expect={2})
        assert "error" in r.errtext and path.name in r.errtext, (cmd, r)
    assert not (tmp_path / "out.tdz").exists()
    run_hostile("trove", "verify", path, watch=tmp_path, expect={1, 2})
    # --permissive reads it the way torch does, and says where the readers part ways.
    r = run_hostile("trove", "info", "--permissive", path, watch=tmp_path, expect={0, 2})
    if r.code == 0:
        assert "zip readers disagree" in r.text + r.errtext, r


def test_many_end_record_signatures(tmp_path):
    # A comment packed with end-record signatures, each with a comment length reaching the end.
    body = zc.plain(zc.torch_like([("archive/data.pkl", zc.BENIGN), ("archive/version", b"3\n")]))
    n = 2900
    comment = bytearray()
    for k in range(n):
        rest = (n - k) * 22 - 22
        comment += zc.end_record(2, 0, 0, b"")[:20] + struct.pack("<H", rest)
    data = body[:-2] + struct.pack("<H", len(comment)) + bytes(comment)
    path = tmp_path / "many.pt"
    path.write_bytes(data)
    # The last record (the one torch and zipfile take) points at no directory: refused.
    r = run_hostile("trove", "scan", path, watch=tmp_path, expect={1})
    assert "zip container refused" in r.text, r
    run_hostile("trove", "info", path, watch=tmp_path, expect={2})


def test_zip64_locator_pointing_past_the_file(tmp_path):
    z = zc.torch_like([("archive/data.pkl", zc.BENIGN), ("archive/version", b"3\n")])
    cd = z.central()
    data = bytes(z.body) + cd + zc.zip64_locator(1 << 62) + zc.end_record(0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
    path = tmp_path / "z.pt"
    path.write_bytes(data)
    run_hostile("trove", "scan", path, watch=tmp_path, expect={1})
    run_hostile("trove", "info", "--permissive", path, watch=tmp_path, expect={2})


def test_case_collision_storm(tmp_path):
    # Thousands of names that fold to the same one: lookups stay bounded.
    z = zc.Zip()
    z.add("archive/data.pkl", zc.BENIGN).add("archive/version", b"3\n")
    import itertools
    for k, combo in enumerate(itertools.product("aA", repeat=12)):
        if k >= 3000:
            break
        z.add("archive/data/" + "".join(combo), b"x")
    path = tmp_path / "storm.pt"
    path.write_bytes(zc.plain(z))
    run_hostile("trove", "scan", path, watch=tmp_path, expect={1})
    run_hostile("trove", "info", path, watch=tmp_path, expect={2})
    run_hostile("trove", "info", "--permissive", path, watch=tmp_path, expect={0, 2})


# ---- legacy tar ---------------------------------------------------------------------------------

def write_tar(tmp_path, members, name="legacy.tar"):
    path = tmp_path / name
    path.write_bytes(zc.legacy_tar(members))
    return path


def test_legacy_tar_huge_storage_count(tmp_path):
    storages = pickle_of(b"\x8a\x08" + b"\xff" * 7 + b"\x7f") + zc.storage_record("0") + pickle_of(b"]")
    path = write_tar(tmp_path, zc.legacy_members(storages=storages))
    r = run_hostile("trove", "scan", path, watch=tmp_path, expect={1})
    assert "tar checkpoint" in r.text


def test_legacy_tar_huge_numel_and_ndim(tmp_path):
    storages = (pickle_of(b"K\x01") + pickle_of(b"(" + zc.s("0") + zc.s("cpu") + zc.glob("torch", "FloatStorage") + b"t") +
                struct.pack("<q", -1) + b"\0" * 8)
    tensors = (pickle_of(b"K\x01") + pickle_of(b"(" + zc.s("t") + zc.s("0") + zc.glob("torch", "FloatTensor") + b"t") +
               struct.pack("<ii", 0x7FFFFFFF, 0))
    path = write_tar(tmp_path, zc.legacy_members(storages=storages, tensors=tensors))
    r = run_hostile("trove", "scan", path, watch=tmp_path, expect={1})
    assert "not scanned" in r.text, r


def test_legacy_tar_member_past_the_end(tmp_path):
    path = write_tar(tmp_path, zc.legacy_members())
    data = bytearray(path.read_bytes())
    # Grow the first member's size field past the file, and fix the checksum tarfile checks.
    data[124:136] = b"%011o\0" % (1 << 33)
    data[148:156] = b" " * 8
    data[148:156] = b"%06o\0 " % sum(data[:512])
    path.write_bytes(bytes(data))
    r = run_hostile("trove", "scan", path, watch=tmp_path, expect={1})
    assert "tar checkpoint not fully listed" in r.text, r
    run_hostile("trove", "info", path, watch=tmp_path, expect={2})


def test_legacy_tar_symlink_member(tmp_path):
    import io
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in zc.legacy_members()[:3]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("tensors")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        t.addfile(link)
    path = tmp_path / "link.tar"
    path.write_bytes(buf.getvalue())
    r = run_hostile("trove", "scan", path, watch=tmp_path, expect={1})
    assert "not a regular file" in r.text and "critical" in r.text, r


def test_legacy_tar_many_members(tmp_path):
    path = write_tar(tmp_path, [(f"m{k}", b"") for k in range(5000)] + zc.legacy_members(main=zc.hostile()))
    r = run_hostile("trove", "scan", path, watch=tmp_path, expect={1})
    assert "posix.system" in r.text, r
