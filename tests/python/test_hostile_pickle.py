"""Pickle grammar a Python unpickler accepts and trove's VM once stopped at (issue 19): every form
here makes torch.load run `posix.system`, so `trove scan` must list that global as critical
(exit 1) and info/cat/convert must refuse the file naming it (exit 2). The payload writes a
marker file that must never appear; each case is first proven live by a torch.load in a
subprocess (CPython accepts the grammar), so no case tests a form Python would refuse."""
import json
import os
import struct
import subprocess
import sys

import pytest

from hostile import run_hostile
from pickles import BUILD, EMPTY_DICT, EMPTY_LIST, MARK, NONE, REDUCE, STOP, dict_of, glob, ordered_dict, s, torch_zip, tup

POP, APPENDS, SETITEM, TUPLE2 = b"0", b"e", b"s", b"\x86"
BININT1, BYTEARRAY8, APPEND = b"K", b"\x96", b"a"


def payload(cmd):
    return glob("posix", "system") + tup(s(cmd)) + REDUCE + POP


# name -> (protocol byte, construct before the payload). Each construct leaves the stack as it found it.
GRAMMAR = {
    "int_base0_hex": (2, b"I0x10\n" + POP),
    "int_octal": (2, b"I010\n" + POP),
    "int_underscore": (2, b"I1_000\n" + POP),
    "int_nul_ends_text": (2, b"I5\x00junk\n" + POP),
    "long_hex": (2, b"L0x10L\n" + POP),
    "put_signed": (2, NONE + b"p+5\n" + POP + b"g5\n" + POP),
    "put_underscore_get_spaces": (2, NONE + b"p1_0\n" + POP + b"g 10\n" + POP),
    "setitem_on_list": (2, EMPTY_LIST + MARK + NONE + APPENDS + BININT1 + b"\x00" + BININT1 + b"\x09" + SETITEM + POP),
    "setitem_on_list_negative": (2, EMPTY_LIST + MARK + NONE + APPENDS + b"J" + struct.pack("<i", -1) + NONE +
                                 SETITEM + POP),
    "build_none_slotstate": (2, EMPTY_LIST + NONE + EMPTY_DICT + TUPLE2 + BUILD + POP),
    "build_slotstate_on_ordereddict": (2, ordered_dict() + NONE + dict_of([(s("a"), BININT1 + b"\x01")]) + TUPLE2 +
                                       BUILD + POP),
    "append_on_bytearray": (5, BYTEARRAY8 + struct.pack("<Q", 1) + b"a" + BININT1 + b"\x62" + APPEND + POP),
    "appends_on_bytearray": (5, BYTEARRAY8 + struct.pack("<Q", 0) + MARK + BININT1 + b"\x62" + BININT1 + b"\x63" +
                             APPENDS + POP),
}


def build(tmp_path, name, proto, construct):
    marker = tmp_path / f"EXECUTED-{name}"
    pkl = b"\x80" + bytes([proto]) + construct + payload(f"touch {marker}") + EMPTY_DICT + STOP
    return torch_zip(tmp_path / f"{name}.pt", pkl), marker


def torch_runs_it(path, marker):
    """torch.load (weights_only=False, torch 1.13) on the file in a child: does the payload run?"""
    code = "import sys, torch; torch.load(sys.argv[1])"
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, timeout=120)
    ran = marker.exists()
    if ran:
        marker.unlink()
    return ran, p


def assert_refused_naming(tmp_path, path, name):
    out = tmp_path / "out.tdz"
    for args in (("info", path), ("cat", path, "x"), ("convert", path, out)):
        r = run_hostile("trove", *args, watch=tmp_path, expect={2})
        assert name.encode() in r.err, (args, r)
    assert not out.exists()


def assert_scanned_critical(tmp_path, path, name):
    r = run_hostile("trove", "scan", path, "--json", watch=tmp_path, expect={1})
    report = json.loads(r.out)["files"][0]
    crit = [f for f in report["findings"] if f["severity"] == "critical" and name in f["message"]]
    assert crit, report["findings"]
    return report


@pytest.mark.parametrize("name", sorted(GRAMMAR))
def test_grammar_form_hides_nothing(tmp_path, name):
    proto, construct = GRAMMAR[name]
    path, marker = build(tmp_path, name, proto, construct)
    ran, p = torch_runs_it(path, marker)
    assert ran, f"torch.load did not run the payload, so the case proves nothing: {p.stderr[-600:]!r}"
    report = assert_scanned_critical(tmp_path, path, "posix.system")
    assert not any("not fully readable" in f["message"] for f in report["findings"]), report["findings"]
    assert_refused_naming(tmp_path, path, "posix.system")
    assert not marker.exists()


# ---- severity follows what an attribute chain resolves to ----------------------------------

@pytest.mark.parametrize("module,name", [
    ("torch.serialization", "os.system"),   # protocol 4 follows dotted names
    ("torch.serialization.os", "system"),
    ("os.path", "os.system"),
    ("numpy", "os.system"),
    ("builtins", "getattr"),
    ("operator", "attrgetter"),
    ("torch", "load"),
    ("numpy", "load"),
    ("runpy", "run_path"),
    ("pty", "spawn"),
])
def test_attribute_chain_graded_as_its_target(tmp_path, module, name):
    marker = tmp_path / "EXECUTED"
    pkl = (b"\x80\x04" + b"\x8c" + bytes([len(module)]) + module.encode() + b"\x8c" + bytes([len(name)]) +
           name.encode() + b"\x93" + tup(s(f"touch {marker}")) + REDUCE + STOP)
    path = torch_zip(tmp_path / "chain.pt", pkl)
    report = assert_scanned_critical(tmp_path, path, f"{module}.{name}")
    assert_refused_naming(tmp_path, path, f"{module}.{name}")
    assert not marker.exists()
    del report


# ---- where reading stops, the lexical pass lists the rest ------------------------------------

def test_names_after_a_stop_are_listed(tmp_path):
    # "I12a" is no int literal (Python stops there too); a scanner must still show what follows.
    marker = tmp_path / "EXECUTED"
    pkl = b"\x80\x02" + b"I12a\n" + POP + payload(f"touch {marker}") + EMPTY_DICT + STOP
    path = torch_zip(tmp_path / "stop.pt", pkl)
    report = assert_scanned_critical(tmp_path, path, "posix.system")
    msgs = [f["message"] for f in report["findings"] if "posix.system" in f["message"]]
    assert any("lexical pass" in m for m in msgs), msgs
    assert_refused_naming(tmp_path, path, "posix.system")


def test_extension_codes_are_listed(tmp_path):
    # EXT1 names whatever copyreg's registry maps the code to at run time.
    pkl = b"\x80\x02" + b"\x82\x07" + tup(s("x")) + REDUCE + STOP
    path = torch_zip(tmp_path / "ext.pt", pkl)
    report = assert_scanned_critical(tmp_path, path, "extension code 7")
    assert_refused_naming(tmp_path, path, "EXT1 7")
    del report


def test_stack_global_of_a_data_call_is_resolved(tmp_path):
    # str("posix") is data to trove too, so STACK_GLOBAL's module is known: posix.system.
    pkl = (b"\x80\x04" + glob("builtins", "str") + tup(s("posix")) + REDUCE + b"\x8c\x06system" + b"\x93" +
           tup(s("true")) + REDUCE + STOP)
    path = torch_zip(tmp_path / "str_call.pt", pkl)
    assert_scanned_critical(tmp_path, path, "posix.system")
    assert_refused_naming(tmp_path, path, "posix.system")


def test_computed_stack_global_is_a_finding(tmp_path):
    # The module name is the result of calling an unknown name: nothing literal to list, so the
    # scan says a STACK_GLOBAL reaches a name it cannot know.
    pkl = (b"\x80\x04" + glob("foo", "bar") + tup(s("posix")) + REDUCE + b"\x8c\x06system" + b"\x93" +
           tup(s("true")) + REDUCE + STOP)
    path = torch_zip(tmp_path / "computed.pt", pkl)
    r = run_hostile("trove", "scan", path, "--json", watch=tmp_path, expect={1})
    report = json.loads(r.out)["files"][0]
    assert any(f["severity"] == "high" and "STACK_GLOBAL whose module and name are computed" in f["message"]
               for f in report["findings"]), report["findings"]


def test_lexical_pass_stop_is_reported(tmp_path):
    # Reading stops at a bad INT; the rest holds an unknown opcode, past which nothing is listed.
    pkl = b"\x80\x02" + b"I12a\n" + POP + b"\xff" + payload("true") + EMPTY_DICT + STOP
    path = torch_zip(tmp_path / "lexstop.pt", pkl)
    r = run_hostile("trove", "scan", path, "--json", watch=tmp_path, expect={1})
    report = json.loads(r.out)["files"][0]
    assert any("lexical pass" in f["message"] and "unknown opcode 0xff" in f["message"]
               for f in report["findings"]), report["findings"]
