"""Archives that torch's zip reader, Python's zipfile and trove could read differently, built byte
by byte, and the three readers' views of them (for tests/python/test_scan_parity.py and
test_hostile_zipscan.py).

Each case holds a benign `data.pkl` and a hostile pickle that only some reader opens. The views
read records only: torch's `PyTorchFileReader` and zipfile's `read` never unpickle anything.
"""
import io
import json
import pickletools
import struct
import subprocess
import tarfile
import zlib

from conftest import BIN_DIR
from pickles import call, dict_of, glob, pickle_of, s

LOCAL_SIG, CENTRAL_SIG, END_SIG = 0x04034B50, 0x02014B50, 0x06054B50
ZIP64_END_SIG, ZIP64_LOCATOR_SIG = 0x06064B50, 0x07064B50

BENIGN = pickle_of(dict_of([]))


def hostile(module="posix", name="system", arg="touch /nonexistent/trove-marker"):
    return pickle_of(call(glob(module, name), s(arg)))


# ---- assembling archives ------------------------------------------------------------------------

class Zip:
    """Local headers and payloads laid out from `base`; central directories and end records are
    assembled from them on demand, so one file can hold several that disagree."""

    def __init__(self, base=0):
        self.base = base
        self.body = bytearray()
        self.entries = []  # (name, data, local offset)

    def add(self, name, data, local_name=None, method=0):
        name = name.encode() if isinstance(name, str) else name
        lname = name if local_name is None else local_name.encode()
        payload = data if method == 0 else zlib.compress(data)[2:-4]
        crc = zlib.crc32(data)
        offset = self.base + len(self.body)
        self.body += struct.pack("<IHHHHHIIIHH", LOCAL_SIG, 20, 0, method, 0, 0x21, crc, len(payload), len(data),
                                 len(lname), 0) + lname + payload
        self.entries.append((name, data, offset, method, len(payload)))
        return self

    def central(self, only=None):
        out = bytearray()
        for name, data, offset, method, csize in self.entries:
            if only is not None and name.decode() not in only:
                continue
            out += struct.pack("<IHHHHHHIIIHHHHHII", CENTRAL_SIG, 20, 20, 0, method, 0, 0x21, zlib.crc32(data), csize,
                               len(data), len(name), 0, 0, 0, 0, 0, offset) + name
        return bytes(out)

    def count(self, only=None):
        return sum(1 for e in self.entries if only is None or e[0].decode() in only)


def end_record(count, cd_size, cd_offset, comment=b""):
    return struct.pack("<IHHHHIIH", END_SIG, 0, 0, count, count, cd_size, cd_offset, len(comment)) + comment


def zip64_end(count, cd_size, cd_offset, extensible=b""):
    return struct.pack("<IQHHIIQQQQ", ZIP64_END_SIG, 44 + len(extensible), 45, 45, 0, 0, count, count, cd_size,
                       cd_offset) + extensible


def zip64_locator(offset):
    return struct.pack("<IIQI", ZIP64_LOCATOR_SIG, 0, offset, 1)


def plain(z, comment=b""):
    cd = z.central()
    return bytes(z.body) + cd + end_record(z.count(), len(cd), z.base + len(z.body), comment)


def torch_like(entries, base=0):
    z = Zip(base)
    for name, data in entries:
        z.add(name, data)
    return z


# ---- the cases ----------------------------------------------------------------------------------
# Each returns the file's bytes. `expect_disagreement` says whether the readers part ways.

def case_clean():
    return plain(torch_like([("archive/data.pkl", BENIGN), ("archive/version", b"3\n")]))


def case_clean_with_comment():
    return plain(torch_like([("archive/data.pkl", BENIGN), ("archive/version", b"3\n")]), comment=b"made by a test")


def case_case_variant():
    # torch's lookup ignores case; which of the two it opens is up to its sort.
    return plain(torch_like([("archive/data.pkl", BENIGN), ("archive/DATA.PKL", hostile()), ("archive/version", b"3\n")]))


def case_case_variant_only():
    # No lower-case data.pkl at all: torch opens DATA.PKL.
    return plain(torch_like([("archive/version", b"3\n"), ("archive/DATA.PKL", hostile())]))


def case_duplicate_names():
    return plain(torch_like([("archive/data.pkl", BENIGN), ("archive/data.pkl", hostile()), ("archive/version", b"3\n")]))


def case_end_record_in_comment(padding=b""):
    # A benign archive whose comment is a second, hostile archive (offsets absolute in the file):
    # the last end-record signature is the hostile one. With padding after it, only the benign
    # record's comment reaches the end of the file.
    outer = torch_like([("archive/data.pkl", BENIGN), ("archive/version", b"3\n")])
    outer_cd = outer.central()
    head = bytes(outer.body) + outer_cd
    inner = torch_like([("archive/data.pkl", hostile()), ("archive/version", b"3\n")], base=len(head) + 22)
    inner_bytes = plain(inner) + padding
    return head + end_record(outer.count(), len(outer_cd), len(outer.body), comment=inner_bytes)


def case_end_record_in_padded_comment():
    return case_end_record_in_comment(padding=b"\0" * 8)


def case_truncated_end_signature():
    # A comment ending in an end-record signature with fewer than 22 bytes after it: zipfile stops
    # there, torch skips it.
    return plain(torch_like([("archive/data.pkl", hostile()), ("archive/version", b"3\n")]),
                 comment=b"note" + struct.pack("<I", END_SIG) + b"\0" * 6)


def case_zip64_extensible_data():
    # torch follows the locator to a zip64 end record whose central directory lists the hostile
    # entries; its extensible data ends with a benign directory and a fake record right before the
    # locator, which is where Python's zipfile reads.
    z = Zip()
    z.add("archive/data.pkl", BENIGN).add("archive/version", b"3\n")
    z.add("archive/data.pkl", hostile()).add("archive/version", b"3\n")
    benign_cd = Zip.central(_subset(z, [0, 1]))
    hostile_cd = Zip.central(_subset(z, [2, 3]))
    cd_at = len(z.body)
    z64_at = cd_at + len(hostile_cd)
    # Extensible data: the benign directory, then a fake zip64 record pointing at it.
    benign_at = z64_at + 56
    fake = zip64_end(2, len(benign_cd), benign_at)
    extensible = benign_cd + fake
    real = zip64_end(2, len(hostile_cd), cd_at, extensible)
    return (bytes(z.body) + hostile_cd + real + zip64_locator(z64_at) +
            end_record(0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF))


def case_zip64_locator_elsewhere():
    # No extensible data, but the locator points to a zip64 record that is not right before it.
    z = torch_like([("archive/data.pkl", hostile()), ("archive/version", b"3\n")])
    cd = z.central()
    cd_at = len(z.body)
    real_at = cd_at + len(cd)
    real = zip64_end(2, len(cd), cd_at)
    decoy = zip64_end(2, len(cd), cd_at)  # zipfile's, 56 bytes before the locator
    return bytes(z.body) + cd + real + decoy + zip64_locator(real_at) + end_record(0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)


def case_prepended_unadjusted():
    # Bytes glued before an archive whose offsets were not moved: zipfile shifts every offset by
    # them, torch's reader does not.
    return b"#!/bin/sh\nexit 0\n" + plain(torch_like([("archive/data.pkl", hostile()), ("archive/version", b"3\n")]))


def case_prepended_adjusted():
    # The same with every offset moved: all readers agree.
    pre = b"#!/bin/sh\nexit 0\n"
    return pre + plain(torch_like([("archive/data.pkl", BENIGN), ("archive/version", b"3\n")], base=len(pre)))


def case_local_name_mismatch():
    z = Zip()
    z.add("archive/data.pkl", hostile(), local_name="archive/data.pkx").add("archive/version", b"3\n")
    return plain(z)


def case_central_past_count():
    # Three entries in the directory, two in the count: zipfile reads all three (the last
    # data.pkl wins), torch stops at two.
    z = Zip()
    z.add("archive/data.pkl", BENIGN).add("archive/version", b"3\n").add("archive/data.pkl", hostile())
    cd = z.central()
    return bytes(z.body) + cd + end_record(2, len(cd), len(z.body))


def case_deflated_case_variant():
    z = Zip()
    z.add("archive/version", b"3\n").add("archive/Data.Pkl", hostile(), method=8)
    return plain(z)


def _subset(z, indices):
    sub = Zip(z.base)
    sub.entries = [z.entries[i] for i in indices]
    return sub


CASES = {
    "clean": (case_clean, False),
    "clean_with_comment": (case_clean_with_comment, False),
    "prepended_adjusted": (case_prepended_adjusted, False),
    "case_variant": (case_case_variant, True),
    "case_variant_only": (case_case_variant_only, False),
    "deflated_case_variant": (case_deflated_case_variant, False),
    "duplicate_names": (case_duplicate_names, True),
    "end_record_in_comment": (case_end_record_in_comment, True),
    "end_record_in_padded_comment": (case_end_record_in_padded_comment, True),
    "truncated_end_signature": (case_truncated_end_signature, True),
    "zip64_extensible_data": (case_zip64_extensible_data, True),
    "zip64_locator_elsewhere": (case_zip64_locator_elsewhere, True),
    # torch's reader cannot open it (and torch.load would not take it for a zip); zipfile can.
    "prepended_unadjusted": (case_prepended_unadjusted, None),
    "local_name_mismatch": (case_local_name_mismatch, True),
    "central_past_count": (case_central_past_count, True),
}


# ---- what each reader sees ----------------------------------------------------------------------

def torch_view(path):
    """{record name (after the top folder): bytes} as torch's reader returns them, or None when it
    cannot open the archive. Includes the names torch.load asks for (data.pkl, version)."""
    import torch
    try:
        reader = torch._C.PyTorchFileReader(str(path))
    except Exception:
        return None
    names = []
    try:
        names = list(reader.get_all_records())
    except Exception:
        pass
    view = {}
    for name in names + ["data.pkl", "version"]:
        try:
            view[name] = bytes(reader.get_record(name))
        except Exception:
            pass
    return view


def zipfile_view(path):
    """[(name, bytes)] as Python's zipfile reads them (every directory entry), or None."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as z:
            return [(info.filename, z.open(info).read()) for info in z.infolist()]
    except Exception:
        return None


def trove_view(path, permissive=True):
    """{name: bytes} from `trove info --json` (the records trove reads, at its offsets), or None
    when trove refuses the file."""
    p = subprocess.run([f"{BIN_DIR}/trove", "info", "--json"] + (["--permissive"] if permissive else []) + [str(path)],
                       capture_output=True, timeout=60)
    if p.returncode != 0:
        return None
    data = open(path, "rb").read()
    view = {}
    for r in json.loads(p.stdout)["records"]:
        raw = data[r["offset"]:r["offset"] + r["stored_size"]]
        view[r["name"]] = raw if r["method"] == "stored" else zlib.decompressobj(-15).decompress(raw)
    return view


def scan_report(path):
    p = subprocess.run([f"{BIN_DIR}/trove", "scan", "--json", str(path)], capture_output=True, timeout=60)
    assert p.returncode in (0, 1), (p.returncode, p.stderr)
    return p.returncode, json.loads(p.stdout)["files"][0]


def pickle_globals(data):
    """Every module.name a pickle imports (GLOBAL, or STACK_GLOBAL after two strings), read with
    pickletools (nothing is run); stops quietly where the pickle breaks."""
    found, strings = set(), []
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            if op.name == "GLOBAL":
                module, name = arg.split(" ", 1)
                found.add(f"{module}.{name}")
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.add(f"{strings[-2]}.{strings[-1]}")
            elif isinstance(arg, str):
                strings.append(arg)
    except Exception:
        pass
    return found


def looks_like_pickle(data):
    return len(data) >= 3 and data[0] == 0x80 and 2 <= data[1] <= 5


# ---- legacy tar checkpoints ---------------------------------------------------------------------

def storage_record(key, cls="FloatStorage", numel=2):
    """A `storages` record: the (key, location, type) pickle, then int64 numel and the bytes."""
    esize = {"FloatStorage": 4, "DoubleStorage": 8, "HalfStorage": 2, "ByteStorage": 1, "LongStorage": 8}[cls]
    args = pickle_of(b"(" + s(key) + s("cpu") + glob("torch", cls) + b"t")
    return args + struct.pack("<q", numel) + b"\0" * (esize * numel)


def legacy_tar(members, fmt=tarfile.USTAR_FORMAT):
    """A tar holding the given (name, bytes) members, written by Python's tarfile."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


def legacy_members(storages=None, tensors=None, main=None):
    storages = storages if storages is not None else pickle_of(b"K\x01") + storage_record("0") + pickle_of(b"]")
    tensors = tensors if tensors is not None else pickle_of(b"K\x00")
    main = main if main is not None else pickle_of(dict_of([]))
    return [("sys_info", pickle_of(dict_of([]))), ("pickle", main), ("storages", storages), ("tensors", tensors)]
