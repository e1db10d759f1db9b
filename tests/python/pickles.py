"""Hand-assembled pickle opcodes for crafted and hostile checkpoints.

Real torch files come from torch; these build what torch would never write, byte by byte, so
the tests can say exactly which lie each file tells.
"""
import struct
import zipfile

PROTO2 = b"\x80\x02"
MARK, STOP, TUPLE, REDUCE, SETITEMS, APPENDS = b"(", b".", b"t", b"R", b"u", b"e"
EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, NONE = b"}", b"]", b")", b"N"
NEWTRUE, NEWFALSE, BINPERSID, BUILD = b"\x88", b"\x89", b"Q", b"b"


def glob(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def s(text):
    b = text.encode("utf-8")
    return b"X" + struct.pack("<I", len(b)) + b


def i(n):
    if -2 ** 31 <= n < 2 ** 31:
        return b"J" + struct.pack("<i", n)
    nbytes = (n.bit_length() + 8) // 8
    return b"\x8a" + bytes([nbytes]) + n.to_bytes(nbytes, "little", signed=True)


def tup(*items):
    return MARK + b"".join(items) + TUPLE


def call(fn, *args):
    return fn + tup(*args) + REDUCE


def ordered_dict():
    return call(glob("collections", "OrderedDict"))


def storage(cls, key, numel, module="torch"):
    return tup(s("storage"), glob(module, cls), s(key), s("cpu"), i(numel)) + BINPERSID


def tensor_v2(storage_pid, offset, size, stride, requires_grad=False):
    return call(glob("torch._utils", "_rebuild_tensor_v2"), storage_pid, i(offset), tup(*map(i, size)),
                tup(*map(i, stride)), NEWTRUE if requires_grad else NEWFALSE, ordered_dict())


def tensor_v3(storage_pid, offset, size, stride, dtype_name):
    return call(glob("torch._utils", "_rebuild_tensor_v3"), storage_pid, i(offset), tup(*map(i, size)),
                tup(*map(i, stride)), NEWFALSE, ordered_dict(), glob("torch", dtype_name))


def dict_of(pairs):
    """pairs: [(key bytes-op, value bytes-op)]"""
    return EMPTY_DICT + MARK + b"".join(k + v for k, v in pairs) + SETITEMS


def pickle_of(body):
    return PROTO2 + body + STOP


def torch_zip(path, pkl, records=None, prefix="archive", compression=zipfile.ZIP_STORED, extra=None):
    """A zip laid out like torch's: <prefix>/data.pkl, <prefix>/data/<key>..., <prefix>/version."""
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        z.writestr(f"{prefix}/data.pkl", pkl)
        for key, data in (records or {}).items():
            z.writestr(f"{prefix}/data/{key}", data)
        for name, data in (extra or {}).items():
            z.writestr(f"{prefix}/{name}", data)
        z.writestr(f"{prefix}/version", b"3\n")
    return path
