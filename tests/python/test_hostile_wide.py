"""Hostile wide tensordict trees (docs/security.md, "Resource caps"): the caps on leaves, levels,
directory listings and mapped leaf files, each reached by a real input, and the memory of reading
a tree at the leaf cap.

Wide archives are packed by hand (`write_stored_zip`): a central directory of hundreds of
thousands of tiny entries is a few MB and takes a second or two, where zipfile would take a
minute. The caps are read from their header, so a tree "at the cap" follows the cap.
"""
import json
import os
import re
import struct
import zlib

import pytest

from conftest import SOURCE
from hostile import peak_rss, run_hostile

# Issue 11's target: peak resident memory of any command under this, plus what it was asked to hold.
TARGET_RSS_BYTES = 256 << 20

LEVEL = {"shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>",
         "_format_version": 1, "_class": "tensordict:TensorDict"}
# tensordict 0.3's layout: no _format_version, no "type" entries; levels are found by listing.
OLD_LEVEL = {"shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"}
LEAF = {"device": "cpu", "shape": [1], "dtype": "torch.float32", "is_nested": False}


def cap(name):
    with open(os.path.join(SOURCE, "src", "formats", "tensordict", "level_reader.h")) as f:
        m = re.search(r"constexpr uint64_t " + name + r" = uint64_t\{1\} << (\d+);", f.read())
    assert m, name
    return 1 << int(m.group(1))


K_MAX_LEAVES = cap("kMaxLeaves")
K_MAX_LEVELS = cap("kMaxLevels")
K_MAX_ENTRIES = cap("kMaxEntriesPerLevel")


def write_stored_zip(path, entries):
    """A zip64 archive of stored entries, as zipfile would read it."""
    out = bytearray()
    central = bytearray()
    for name, data in entries:
        n = name.encode()
        crc = zlib.crc32(data)
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, len(data), len(data), len(n), 0)
        out += n + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, crc, len(data), len(data),
                               len(n), 0, 0, 0, 0, 0, offset)
        central += n
    assert len(out) < 1 << 32  # offsets fit the classic fields
    # More than 65535 entries: the count is in the zip64 end record only.
    count, cd_offset = len(entries), len(out)
    out += central
    z64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, len(central), cd_offset)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    path.write_bytes(out)
    return path


def flat_tdz(path, leaves):
    meta = {f"k{i}": LEAF for i in range(leaves)}
    meta.update(LEVEL)
    entries = [("meta.json", json.dumps(meta).encode())]
    entries += [(f"k{i}.memmap", b"\0\0\x80\x3f") for i in range(leaves)]
    return write_stored_zip(path, entries)


@pytest.fixture(scope="module")
def at_leaf_cap(tmp_path_factory):
    return flat_tdz(tmp_path_factory.mktemp("wide") / "cap.tdz", K_MAX_LEAVES)


@pytest.mark.parametrize("json_output", [False, True])
def test_info_of_a_tree_at_the_leaf_cap_stays_under_the_target(at_leaf_cap, json_output):
    code, out, err, rss = peak_rss("info", at_leaf_cap, *(["--json"] if json_output else []))
    assert code == 0, err
    if json_output:  # written record by record, tensor by tensor (the whole document took ~850 MB)
        info = json.loads(out)
        assert len(info["tensors"]) == K_MAX_LEAVES and len(info["records"]) == K_MAX_LEAVES + 1
    else:
        assert f"tensordict:TensorDict of {K_MAX_LEAVES} tensors".encode() in out
    assert rss < TARGET_RSS_BYTES, f"trove info of {K_MAX_LEAVES} leaves: peak RSS {rss >> 20} MiB"


def test_one_leaf_beyond_the_cap_is_refused_by_name(tmp_path):
    f = flat_tdz(tmp_path / "over.tdz", K_MAX_LEAVES + 1)
    for command in (["info"], ["verify"], ["stats"]):
        r = run_hostile("trove", command[0], f, *command[1:], watch=tmp_path, expect={1, 2})
        assert f"more than kMaxLeaves ({K_MAX_LEAVES}) leaves" in r.errtext + r.text, r


def test_one_level_beyond_the_cap_is_refused_by_name(tmp_path):
    root = {f"l{i}": {"type": "TensorDict"} for i in range(K_MAX_LEVELS)}
    root.update(LEVEL)
    level = json.dumps(LEVEL).encode()
    f = write_stored_zip(tmp_path / "levels.tdz", [("meta.json", json.dumps(root).encode())] +
                         [(f"l{i}/meta.json", level) for i in range(K_MAX_LEVELS)])
    # The root and K_MAX_LEVELS sub-levels: one more than the cap.
    r = run_hostile("trove", "info", f, watch=tmp_path, expect={2})
    assert f"more than kMaxLevels ({K_MAX_LEVELS})" in r.errtext, r


def test_archive_listing_beyond_the_cap_is_refused_before_reading_it(tmp_path):
    # An old-layout root makes the reader list its sub-directories: one name more than a level
    # may hold, each a directory of one entry (no meta.json: none of them would be read anyway).
    entries = [("meta.json", json.dumps(OLD_LEVEL).encode())]
    entries += [(f"d{i}/x", b"") for i in range(K_MAX_ENTRIES + 1)]
    f = write_stored_zip(tmp_path / "listing.tdz", entries)
    assert f.stat().st_size < 64 << 20
    r = run_hostile("trove", "info", f, watch=tmp_path, expect={2})
    assert f"more than kMaxEntriesPerLevel ({K_MAX_ENTRIES}) sub-directories" in r.errtext, r


def test_directory_listing_beyond_the_cap_is_refused(tmp_path):
    # As above for a directory: the entries are hard links (ext4 allows 65,000 per file), so
    # no data is written, only directory entries.
    d = tmp_path / "td"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps(OLD_LEVEL))
    per_file = 60000
    for i in range(K_MAX_ENTRIES):  # with meta.json, one more than the cap
        if i % per_file == 0:
            source = d / f"s{i}"
            source.write_bytes(b"")
        else:
            os.link(source, d / f"e{i}")
    r = run_hostile("trove", "info", d, watch=tmp_path, expect={2})
    assert f"more than kMaxEntriesPerLevel ({K_MAX_ENTRIES}) entries in one directory" in r.errtext, r


def test_many_large_leaf_files_are_refused_not_a_crash(tmp_path):
    # Each leaf file of more than a few hundred bytes is mapped; a process gets ~65,530 mappings
    # and then malloc fails too (trove used to die of SIGABRT there). 2^15 + 1 sparse files of
    # 1 kB each: refused by the cap's name.
    n = (1 << 15) + 1
    d = tmp_path / "td"
    d.mkdir()
    meta = {f"k{i}": dict(LEAF, shape=[256]) for i in range(n)}
    meta.update(LEVEL)
    (d / "meta.json").write_text(json.dumps(meta))
    for i in range(n):
        fd = os.open(d / f"k{i}.memmap", os.O_WRONLY | os.O_CREAT, 0o644)
        os.ftruncate(fd, 1024)
        os.close(fd)
    r = run_hostile("trove", "info", d, watch=tmp_path, expect={2})
    assert "more than kMaxMappedLeafFiles (32768) leaf files" in r.errtext, r
    # Small leaves are read, not mapped: as many of those are fine.
    for i in range(n):
        os.truncate(d / f"k{i}.memmap", 4)
        meta[f"k{i}"] = LEAF
    (d / "meta.json").write_text(json.dumps(meta))
    r = run_hostile("trove", "info", d, watch=tmp_path, expect={0})
    assert f"tensordict:TensorDict of {n} tensors" in r.text, r
