"""An independent reader and writer of .safetensors, written from the format's specification and
the reference implementation's documented ordering, for the tests to check trove against.

Layout: u64 little-endian N, N bytes of JSON (compact; "__metadata__" first; tensors sorted by
the reference's dtype order, descending, then by name; padded with spaces to a multiple of 8),
then the tensors' bytes in that order."""
import json
import struct

# The reference's Dtype declaration order (its writer sorts by it, descending) and bits.
DTYPE_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
               "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
               "C64", "F64", "I64", "U64"]
BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
        "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
        "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}


def write(tensors, metadata=None):
    """tensors: {name: (dtype, shape, raw bytes)}. Returns the file's bytes."""
    names = sorted(tensors, key=lambda n: (-DTYPE_ORDER.index(tensors[n][0]), n.encode("utf-8")))
    header = {}
    if metadata is not None:
        header["__metadata__"] = dict(sorted(metadata.items()))
    offset = 0
    for n in names:
        dtype, shape, raw = tensors[n]
        header[n] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(tensors[n][2] for n in names)


def read(data):
    """Returns ({name: (dtype, shape, raw bytes)}, metadata or None); asserts the layout rules."""
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", None)
    body = data[8 + n:]
    out, end = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        b, e = info["data_offsets"]
        assert b == end, name
        count = 1
        for d in info["shape"]:
            count *= d
        assert e - b == count * BITS[info["dtype"]] // 8, name
        out[name] = (info["dtype"], tuple(info["shape"]), body[b:e])
        end = e
    assert end == len(body)
    return out, metadata
