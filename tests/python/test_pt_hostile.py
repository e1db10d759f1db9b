"""Hostile checkpoints: each ends in a clear error (or a correct bounded result), never in a
crash, a hang, unbounded memory, or anything executed. Bounds: exit below 128, under 20 s,
under 1 GiB of address space (enforced with RLIMIT_AS)."""
import os
import random
import struct
import zipfile

import pytest
import torch

import ptfiles
from pickles import (APPENDS, BINPERSID, EMPTY_LIST, MARK, NEWFALSE, REDUCE, call, dict_of, glob, i, ordered_dict,
                     pickle_of, s, storage, tensor_v2, tensor_v3, torch_zip, tup)

F32 = struct.pack("<10f", *range(10))


def marker_path(tmp_path):
    return str(tmp_path / "EXECUTED")


def shell(cmd_marker):
    return "touch " + cmd_marker


def run_info(trove, path):
    r = trove("info", path, limit=True)
    assert r.code < 128, f"killed by a signal: {r}"
    return r


def assert_refused(trove, path, *needles, marker=None):
    r = run_info(trove, path)
    assert r.code == 2, r
    err = r.errtext
    assert err.startswith("trove: error: "), err
    assert str(path) in err, err
    for n in needles:
        assert n in err, f"{n!r} not in {err!r}"
    if marker:
        assert not os.path.exists(marker)
    return err


# ---- code execution ----------------------------------------------------------------------------

CODE_GLOBALS = [("posix", "system"), ("os", "system"), ("builtins", "eval"), ("builtins", "exec"),
                ("subprocess", "Popen"), ("builtins", "getattr"), ("__builtin__", "eval"),
                ("importlib", "import_module"), ("marshal", "loads"), ("torch.storage.os", "system")]


@pytest.mark.parametrize("module,name", CODE_GLOBALS)
def test_reduce_of_code_global_is_refused(trove, tmp_path, module, name):
    marker = marker_path(tmp_path)
    pkl = pickle_of(call(glob(module, name), s(shell(marker))))
    path = torch_zip(tmp_path / "evil.pt", pkl)
    shown = "builtins" if module == "__builtin__" else module
    err = assert_refused(trove, path, f"refused global '{shown}.{name}'", "archive/data.pkl @ 2", marker=marker)
    assert "archive/data.pkl @ 2: " in err


def test_near_names_of_data_names_are_no_data(trove, tmp_path):
    # A name one letter off an allowlisted one is not it: strict refuses it, the default policy
    # reads what the file makes of it as an inert object (never called) and says so.
    marker = marker_path(tmp_path)
    pkl = pickle_of(call(glob("torch._utils", "_rebuild_tensor_v2x"), s(shell(marker))))
    path = torch_zip(tmp_path / "near.pt", pkl)
    r = trove("info", str(path), "--strict")
    assert r.code == 2 and "refused global 'torch._utils._rebuild_tensor_v2x'" in r.errtext, r
    r = trove("info", str(path))
    assert r.code == 0 and "torch._utils._rebuild_tensor_v2x" in r.errtext and "warning" in r.errtext, r
    assert not os.path.exists(marker)


def test_error_message_format_matches_the_brief(trove, tmp_path):
    pkl = pickle_of(call(glob("posix", "system"), s("true")))
    path = torch_zip(tmp_path / "model.pt", pkl)
    r = run_info(trove, path)
    assert r.errtext.strip() == (f"trove: error: {path}: archive/data.pkl @ 2: refused global 'posix.system': "
                                 "it resolves to posix.system (exec: runs commands or code)")


def test_inst_and_obj_are_refused(trove, tmp_path):
    marker = marker_path(tmp_path)
    inst = b"(S'" + shell(marker).encode() + b"'\nios\nsystem\n."
    assert_refused(trove, torch_zip(tmp_path / "inst.pt", inst), "refused global 'os.system'", marker=marker)
    obj = b"\x80\x02(cos\nsystem\n" + s(shell(marker)) + b"o."
    assert_refused(trove, torch_zip(tmp_path / "obj.pt", obj), "refused global 'os.system'", marker=marker)


def test_stack_global_through_memo_is_refused(trove, tmp_path):
    marker = marker_path(tmp_path)
    # Protocol 4: the names come back from the memo, not from the GLOBAL opcode's text.
    body = (b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94" + b"h\x00h\x01\x93" +
            b"\x8c" + bytes([len(shell(marker))]) + shell(marker).encode() + b"\x85R.")
    assert_refused(trove, torch_zip(tmp_path / "sg.pt", body), "refused global 'os.system'", marker=marker)


def test_torchscript_archive_code_is_never_read(trove, tmp_path):
    marker = marker_path(tmp_path)
    pkl = pickle_of(dict_of([]))
    code = f"import os\nos.system({shell(marker)!r})\n".encode()
    path = torch_zip(tmp_path / "ts.pt", pkl, extra={"constants.pkl": pickle_of(tup()), "code/x.py": code})
    # Its data is read (an empty dict); its code is left, and scan says it is there.
    r = trove("info", path, limit=True)
    assert r.code == 0 and "torchscript" in r.text, r
    s = trove("scan", path, limit=True)
    assert s.code == 1 and "carries code" in s.text, s
    assert not os.path.exists(marker)


def test_scan_reports_without_executing(trove, tmp_path):
    marker = marker_path(tmp_path)
    pkl = pickle_of(call(glob("os", "system"), s(shell(marker))))
    path = torch_zip(tmp_path / "evil.pt", pkl)
    r = trove("scan", path, limit=True)
    assert r.code == 1, r
    assert "os.system" in r.text and "critical" in r.text
    assert not os.path.exists(marker)


# ---- tensors that lie --------------------------------------------------------------------------

def one_tensor_file(tmp_path, name, tensor_op, records):
    return torch_zip(tmp_path / name, pickle_of(dict_of([(s("w"), tensor_op)])), records)


def test_storage_shorter_than_declared(trove, tmp_path):
    p = one_tensor_file(tmp_path, "short.pt", tensor_v2(storage("FloatStorage", "0", 10), 0, [10], [1]), {"0": F32[:-2]})
    assert_refused(trove, p, "record 'archive/data/0' has 38 bytes but the pickle declares 40")


def test_view_out_of_bounds(trove, tmp_path):
    p = one_tensor_file(tmp_path, "oob.pt", tensor_v2(storage("FloatStorage", "0", 10), 8, [5], [1]), {"0": F32})
    assert_refused(trove, p, "tensor 'w'", "needs 52 bytes but its storage has 40")


def test_negative_stride(trove, tmp_path):
    p = one_tensor_file(tmp_path, "neg.pt", tensor_v2(storage("FloatStorage", "0", 10), 9, [5], [-1]), {"0": F32})
    assert_refused(trove, p, "negative stride")


def test_overflowing_shape(trove, tmp_path):
    p = one_tensor_file(tmp_path, "ovf.pt", tensor_v2(storage("FloatStorage", "0", 10), 0, [2 ** 40, 2 ** 40], [1, 1]), {"0": F32})
    assert_refused(trove, p, "overflows")


def test_gigantic_declared_storage(trove, tmp_path):
    p = one_tensor_file(tmp_path, "huge.pt", tensor_v2(storage("FloatStorage", "0", 2 ** 62), 0, [2 ** 62], [1]), {"0": F32})
    assert_refused(trove, p, "storage size overflows")
    p = one_tensor_file(tmp_path, "big.pt", tensor_v2(storage("FloatStorage", "0", 2 ** 40), 0, [2 ** 40], [1]), {"0": F32})
    assert_refused(trove, p, "record 'archive/data/0' has 40 bytes but the pickle declares 4398046511104")


def test_missing_record(trove, tmp_path):
    p = one_tensor_file(tmp_path, "missing.pt", tensor_v2(storage("FloatStorage", "7", 10), 0, [10], [1]), {"0": F32})
    assert_refused(trove, p, "record 'archive/data/7' missing")


def test_unknown_storage_class(trove, tmp_path):
    p = one_tensor_file(tmp_path, "evilstorage.pt", tensor_v2(storage("EvilStorage", "0", 10), 0, [10], [1]), {"0": F32})
    assert_refused(trove, p, "EvilStorage")


def test_unknown_dtype_global(trove, tmp_path):
    p = one_tensor_file(tmp_path, "f128.pt", tensor_v3(storage("UntypedStorage", "0", 40, module="torch.storage"), 0, [10], [1], "float128"), {"0": F32})
    assert_refused(trove, p, "float128")


def test_one_storage_two_dtypes(trove, tmp_path):
    body = dict_of([(s("a"), tensor_v2(storage("FloatStorage", "0", 10), 0, [10], [1])),
                    (s("b"), tensor_v2(storage("IntStorage", "0", 10), 0, [10], [1]))])
    assert_refused(trove, torch_zip(tmp_path / "twotypes.pt", pickle_of(body), {"0": F32}), "two different types")


def test_persistent_id_tricks(trove, tmp_path):
    bad_arity = tup(s("storage"), glob("torch", "FloatStorage"), s("0"), s("cpu")) + BINPERSID
    assert_refused(trove, one_tensor_file(tmp_path, "arity.pt", tensor_v2(bad_arity, 0, [10], [1]), {"0": F32}), "elements")
    escape = tensor_v2(storage("FloatStorage", "../../etc/passwd", 10), 0, [10], [1])
    assert_refused(trove, one_tensor_file(tmp_path, "escape.pt", escape, {"0": F32}), "not a plain record name")
    not_storage = tup(s("module"), glob("torch", "FloatStorage"), s("0"), s("cpu"), i(1)) + BINPERSID
    assert_refused(trove, one_tensor_file(tmp_path, "module.pt", not_storage, {"0": F32}), "persistent id")


def test_setitems_on_a_list_is_refused(trove, tmp_path):
    body = EMPTY_LIST + MARK + s("k") + s("v") + b"u"
    assert_refused(trove, torch_zip(tmp_path / "cve.pt", pickle_of(body)), "SETITEMS")


# ---- resource abuse ----------------------------------------------------------------------------

def test_list_nested_a_million_deep(trove, tmp_path):
    n = 1_000_000
    body = b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b"."
    r = run_info(trove, torch_zip(tmp_path / "deep.pt", body))
    assert r.code in (0, 2), r
    if r.code == 2:
        assert r.errtext.startswith("trove: error: ")


def test_memo_billion_laughs(trove, tmp_path):
    # Each level is a list holding the previous level 10 times: 10^30 paths, 30*10 nodes.
    body = b"\x80\x02]q\x000"
    for level in range(1, 31):
        body += b"](" + (b"h" + bytes([level - 1])) * 10 + b"eq" + bytes([level]) + (b"0" if level < 30 else b"")
    body += b"."
    r = run_info(trove, torch_zip(tmp_path / "laughs.pt", body))
    assert r.code in (0, 2), r


def test_string_claiming_gigabytes(trove, tmp_path):
    body = b"\x80\x02X" + struct.pack("<I", 0xFFFFFFF0) + b"abc."
    assert_refused(trove, torch_zip(tmp_path / "bigstr.pt", body), "archive/data.pkl @ 2")


def test_bad_memo_index(trove, tmp_path):
    assert_refused(trove, torch_zip(tmp_path / "memo.pt", b"\x80\x02h\x05."), "archive/data.pkl @ 2")
    assert_refused(trove, torch_zip(tmp_path / "memo4g.pt", b"\x80\x02Nr\xff\xff\xff\xffj\x00\x00\x00\x01."), "archive/data.pkl @")


def test_truncated_and_random_files(trove, tmp_path):
    path, _ = ptfiles.make_module_state_dict(str(tmp_path))
    data = open(path, "rb").read()
    for cut in (0, 1, 4, 30, 64, 200, len(data) // 2, len(data) - 23, len(data) - 1):
        p = tmp_path / f"cut{cut}.pt"
        p.write_bytes(data[:cut])
        r = run_info(trove, p)
        assert r.code == 2 and r.errtext.startswith("trove: error: "), (cut, r)
    rng = random.Random(5)
    for k in range(20):
        p = tmp_path / f"random{k}.pt"
        head = [b"PK\x03\x04", b"\x80\x02\x8a\x0a", b""][k % 3]
        p.write_bytes(head + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 4000))))
        r = run_info(trove, p)
        assert r.code == 2 and r.errtext.startswith("trove: error: "), (k, r)


def test_deflate_bomb(trove, tmp_path):
    # data.pkl is deflated; its central directory says 20 bytes but it inflates to 50 MB.
    good = pickle_of(dict_of([]))
    p = tmp_path / "bomb.pt"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", good + b"\x00" * 50_000_000)
        z.writestr("archive/version", b"3\n")
    data = bytearray(p.read_bytes())
    # Patch the declared uncompressed size in the central directory and local header.
    cd = data.rfind(b"PK\x01\x02", 0, data.rfind(b"PK\x01\x02"))
    struct.pack_into("<I", data, cd + 24, len(good))
    struct.pack_into("<I", data, 22, len(good))
    p.write_bytes(bytes(data))
    r = run_info(trove, p)
    assert r.code == 2 and r.errtext.startswith("trove: error: "), r


def test_legacy_file_lies(trove, tmp_path):
    path, _ = ptfiles.make_legacy(str(tmp_path))
    data = open(path, "rb").read()
    bad_magic = bytearray(data)
    bad_magic[5] ^= 0xFF
    p = tmp_path / "badmagic.pt"
    p.write_bytes(bytes(bad_magic))
    assert run_info(trove, p).code == 2
    p = tmp_path / "shortlegacy.pt"
    p.write_bytes(data[:-3])
    assert_refused(trove, p, "truncated")
