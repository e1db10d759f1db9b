"""Destinations that are not trove's, signals during a write, orphaned temporaries, the
refresh-checksums rewrite and verify's verdict on .psk.d files (docs/security.md, "Writes").

Every writer replaces an existing destination only when it is what the writer puts there (a
regular file for a file format; a directory of a tensordict's files, or an empty one, for a tree
output); anything else is refused with exit 2 and nothing touched, whatever the options: trove
never deletes a file it did not write. Never `.`, `/` or a directory containing the source; the
source itself may be converted in place."""
import io
import os
import signal
import struct
import subprocess
import sys
import time
import zipfile

import pytest
import torch

from conftest import BIN_DIR, Result
from hostile import TEMPORARY_MARK, peak_rss, run_hostile, tree_state

SIGNAL_WAIT_SECONDS = 60


BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))  # the Python module: its writers under the same rule


def tool(name):
    return os.path.join(BIN_DIR, name)


def small_pt(path):
    torch.save({"w": torch.arange(6, dtype=torch.float32), "b": torch.ones(2)}, path)
    return path


def victim_dir(path):
    """A directory of someone's files: what no writer may take."""
    (path / "sub").mkdir(parents=True)
    (path / "notes.txt").write_text("mine")
    (path / "sub" / "data.bin").write_bytes(b"\x01\x02")
    return path


def is_tensordict(path):
    return (path / "meta.json").is_file()


def refused(r, name):
    assert r.code == 2, r
    assert name in r.errtext and "nothing was written" in r.errtext, r


# ---- convert: destinations of another kind --------------------------------------------------

def test_convert_into_directory_of_other_files_is_refused(tmp_path):
    src = small_pt(tmp_path / "m.pt")
    out = victim_dir(tmp_path / "out")
    r = run_hostile("trove", "convert", src, out, watch=tmp_path, expect={2})
    refused(r, str(out))
    for to in ("pt", "tdz", "pskd"):
        r = run_hostile("trove", "convert", src, out, "--to", to, watch=tmp_path, expect={2})
        refused(r, "is a directory")


def test_convert_into_trailing_slash_sandbox_is_refused(tmp_path):
    src = small_pt(tmp_path / "m.pt")
    sandbox = victim_dir(tmp_path / "sandbox")
    r = run_hostile("trove", "convert", src, str(sandbox) + "/", watch=tmp_path, expect={2})
    refused(r, "does not write")


def test_convert_into_working_directory_is_refused(tmp_path):
    work = victim_dir(tmp_path / "work")
    src = small_pt(work / "m.pt")
    for dest in (".", "./", "..", str(work)):
        r = run_hostile("trove", "convert", src, dest, "--to", "tensordict", cwd=work, watch=tmp_path, expect={2})
        assert "working directory" in r.errtext or "source" in r.errtext, r


def test_convert_into_root_is_refused(tmp_path):
    # The source does not exist: even a broken rule could not write anything to `/`, since the
    # source would be read first; a working rule refuses `/` before looking at the source.
    for to in ("tensordict", "pt"):
        r = run_hostile("trove", "convert", tmp_path / "missing.pt", "/", "--to", to, watch=tmp_path, expect={2})
        assert "/: is the root directory" in r.errtext, r


def test_convert_onto_the_source_converts_in_place(tmp_path):
    src = small_pt(tmp_path / "m.pt")
    run_hostile("trove", "convert", src, src, "--to", "pt", "--dtype", "float16", watch=tmp_path, allowed=[src],
                expect={0})
    assert torch.load(src)["w"].dtype == torch.float16
    td = tmp_path / "td"
    subprocess.run([tool("trove"), "convert", src, td, "--to", "tensordict"], check=True)
    run_hostile("trove", "convert", td, td, "--to", "tensordict", watch=tmp_path, allowed=[td], expect={0})
    assert run_hostile("trove", "diff", src, td, watch=tmp_path, expect={0})


def test_a_file_replaced_in_place_keeps_its_owner_and_mode(tmp_path):
    # As an editor saving it: a read-only file stays read-only, a group's file stays the group's.
    src = small_pt(tmp_path / "m.pt")
    os.chmod(src, 0o640)
    if os.geteuid() == 0:
        os.chown(src, 1234, 5678)
    run_hostile("trove", "convert", src, src, "--to", "pt", "--dtype", "float16", watch=tmp_path, allowed=[src],
                expect={0})
    st = os.stat(src)
    assert oct(st.st_mode & 0o7777) == oct(0o640)
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (1234, 5678)
    out = tmp_path / "out.safetensors"
    out.write_bytes(b"old")
    os.chmod(out, 0o444)
    run_hostile("trove", "convert", src, out, watch=tmp_path, allowed=[out], expect={0})
    assert oct(os.stat(out).st_mode & 0o7777) == oct(0o444) and out.stat().st_size > 3
    assert torch.load(src)["w"].dtype == torch.float16


@pytest.mark.parametrize("to", ["gguf", "safetensors"])
def test_files_into_a_directory_are_built_inside_it_not_beside_it(tmp_path, to):
    # The user named the directory: its parent may be read-only (here: immutable) or another file
    # system (the directory a mount point); the hidden tree goes inside the directory.
    src = tmp_path / "m.pt"
    torch.manual_seed(0)
    torch.save({f"w{i}": torch.randn(256, 256) for i in range(4)}, src)
    parent = tmp_path / "parent"
    out = parent / "out"
    out.mkdir(parents=True)
    (out / "README.md").write_text("mine")
    if subprocess.run(["chattr", "+i", str(parent)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (not root, or not a file system that has it)")
    try:
        dest = out / "g.gguf" if to == "gguf" else out
        r = run_hostile("trove", "convert", src, dest, "--to", to, "--max-shard-size", "300KB", watch=tmp_path,
                        allowed=[out], expect={0})
        names = sorted(os.listdir(out))
        assert "README.md" in names and len([n for n in names if n.endswith("." + to)]) == 4, (names, r)
        assert not any(TEMPORARY_MARK in n for n in names + os.listdir(parent)), names
    finally:
        subprocess.run(["chattr", "-i", str(parent)], check=True)


def test_convert_into_directory_containing_source_is_refused(tmp_path):
    holder = tmp_path / "holder"
    holder.mkdir()
    src = small_pt(holder / "m.pt")
    r = run_hostile("trove", "convert", src, holder, "--to", "tensordict", watch=tmp_path, expect={2})
    refused(r, "contains")
    # A tensordict directory holding the source (which it would otherwise replace) too.
    td = tmp_path / "td"
    subprocess.run([tool("trove"), "convert", src, td, "--to", "tensordict"], check=True)
    inner = td / "inner.pt"
    small_pt(inner)
    r = run_hostile("trove", "convert", inner, td, "--to", "tensordict", watch=tmp_path, expect={2})
    refused(r, "contains")


def test_an_output_that_is_a_file_of_a_directory_source_is_refused(tmp_path):
    # A tensordict's leaf or meta.json replaced by another kind of file leaves the source damaged
    # (verify said ok and cat printed the zip's bytes as floats): every command that writes refuses.
    td = tmp_path / "td"
    subprocess.run([tool("trove"), "convert", small_pt(tmp_path / "m.pt"), td, "--to", "tensordict"], check=True)
    for args in (["convert", td, td / "w.memmap", "--to", "pt"], ["convert", td, td / "meta.json", "--to", "safetensors"],
                 ["pack", td, td / "meta.json"], ["report", td, "-o", td / "meta.json"]):
        r = run_hostile("trove", *args, watch=tmp_path, expect={2})
        refused(r, "a source of this command")
    import trove
    with pytest.raises(trove.RefusedError):
        trove.convert(td, td / "w.memmap", to="pt")
    assert subprocess.run([tool("trove"), "verify", td], capture_output=True).returncode == 0
    # A new file beside its files is written (the directory is then no longer only a tensordict's).
    r = run_hostile("trove", "convert", td, td / "copy.pt", "--to", "pt", watch=tmp_path, allowed=[td / "copy.pt"])
    assert r.code == 0, r
    assert torch.equal(torch.load(td / "copy.pt", weights_only=True)["w"], torch.arange(6, dtype=torch.float32))


def test_a_path_holding_a_nul_is_refused_not_cut(tmp_path):
    # The system would take the name up to the NUL: notes.txt would be replaced by the write.
    import trove
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    src = small_pt(tmp_path / "m.pt")
    with pytest.raises(trove.UsageError, match="NUL"):
        trove.save({"a": torch.zeros(1)}, str(notes) + "\0.safetensors")
    with pytest.raises(trove.UsageError, match="NUL"):
        trove.convert(src, str(notes) + "\0.pt")
    with pytest.raises(trove.UsageError, match="NUL"):
        trove.open(str(src) + "\0.x")
    import trove.data
    with pytest.raises(trove.UsageError, match="NUL"):
        trove.data.open(str(notes) + "\0")
    assert notes.read_text() == "mine"


def test_convert_via_symlinks_is_refused(tmp_path):
    src = small_pt(tmp_path / "m.pt")
    victim = victim_dir(tmp_path / "victim")
    (tmp_path / "to_victim").symlink_to(victim)
    (tmp_path / "to_source.pt").symlink_to(src)
    (tmp_path / "to_here").symlink_to(tmp_path)
    r = run_hostile("trove", "convert", src, tmp_path / "to_victim", "--to", "tensordict", watch=tmp_path, expect={2})
    refused(r, "to_victim")
    # A link to the source is replaced by the output (never written through): the source stays.
    before = src.read_bytes()
    run_hostile("trove", "convert", src, tmp_path / "to_source.pt", watch=tmp_path,
                allowed=[tmp_path / "to_source.pt"], expect={0})
    assert src.read_bytes() == before and not (tmp_path / "to_source.pt").is_symlink()
    r = run_hostile("trove", "convert", src, tmp_path / "to_here", "--to", "tensordict", watch=tmp_path, expect={2})
    refused(r, "contains")


def test_convert_file_where_directory_goes(tmp_path):
    src = small_pt(tmp_path / "m.pt")
    out = tmp_path / "out"
    out.write_text("a file of mine")
    r = run_hostile("trove", "convert", src, out, "--to", "tensordict", watch=tmp_path, expect={2})
    refused(r, "not a directory")
    assert out.read_text() == "a file of mine"


def test_convert_replaces_its_own_kinds(tmp_path):
    src = small_pt(tmp_path / "m.pt")
    td = tmp_path / "td"
    (td).mkdir()  # empty: nothing to lose
    run_hostile("trove", "convert", src, td, watch=tmp_path, allowed=[td], expect={0})
    assert is_tensordict(td)
    (td / "stale.memmap").write_bytes(b"old")  # a tensordict's own leftovers go with it
    run_hostile("trove", "convert", src, td, watch=tmp_path, allowed=[td], expect={0})
    assert not (td / "stale.memmap").exists()
    pt = tmp_path / "out.pt"
    pt.write_bytes(b"an older output")
    run_hostile("trove", "convert", src, pt, watch=tmp_path, allowed=[pt], expect={0})
    assert torch.equal(torch.load(pt)["w"], torch.arange(6, dtype=torch.float32))


def test_no_option_replaces_a_directory_of_other_files(tmp_path):
    src = small_pt(tmp_path / "m.pt")
    out = victim_dir(tmp_path / "out")
    before = tree_state(str(out))
    for args in (["--to", "tensordict"], ["--to", "pt"], ["--to", "safetensors"], ["--to", "tdz"],
                 ["--to", "tensordict", "--sync"]):
        r = run_hostile("trove", "convert", src, out, *args, watch=tmp_path, expect={2})
        assert "nothing was written" in r.errtext, r
    r = run_hostile("trove", "convert", src, out, "--force", watch=tmp_path, expect={2})  # no such option now
    assert tree_state(str(out)) == before


# ---- pack, unpack, presk data outputs ------------------------------------------------------------

def test_unpack_into_non_empty_directory_is_refused(tmp_path):
    src = small_pt(tmp_path / "m.pt")
    tdz = tmp_path / "a.tdz"
    subprocess.run([tool("trove"), "convert", src, tdz], check=True)
    victim = victim_dir(tmp_path / "victim")
    r = run_hostile("trove", "unpack", tdz, victim, watch=tmp_path, expect={2})
    refused(r, "victim")
    # Into the directory holding the archive: never.
    r = run_hostile("trove", "unpack", tdz, tmp_path, watch=tmp_path, expect={2})
    refused(r, "contains")
    # Empty, then an unpacked tensordict: both replaced; the victim never.
    empty = tmp_path / "empty"
    empty.mkdir()
    run_hostile("trove", "unpack", tdz, empty, watch=tmp_path, allowed=[empty], expect={0})
    run_hostile("trove", "unpack", tdz, empty, watch=tmp_path, allowed=[empty], expect={0})
    assert is_tensordict(empty)
    r = run_hostile("trove", "unpack", tdz, victim, watch=tmp_path, expect={2})
    assert (victim / "notes.txt").read_text() == "mine"


def test_pack_into_directory_or_source_is_refused(tmp_path):
    src = small_pt(tmp_path / "m.pt")
    td = tmp_path / "td"
    subprocess.run([tool("trove"), "convert", src, td, "--to", "tensordict"], check=True)
    victim = victim_dir(tmp_path / "victim")
    r = run_hostile("trove", "pack", td, victim, watch=tmp_path, expect={2})
    refused(r, "is a directory")
    r = run_hostile("trove", "pack", td, td, watch=tmp_path, expect={2})
    refused(r, "is a source")
    assert (victim / "notes.txt").read_text() == "mine"


def test_presk_outputs_follow_the_rule(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("1 2 3\n0 1 2\n")
    victim = victim_dir(tmp_path / "victim")
    r = run_hostile("presk", "data", "pack", "--type", "idx[4][3]", text, "-o", victim, watch=tmp_path, expect={2})
    assert "victim" in r.errtext and "nothing was written" in r.errtext, r
    r = run_hostile("presk", "data", "chars", text, "-o", text, watch=tmp_path, expect={2})
    assert "source" in r.errtext, r


# ---- signals and orphans ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def many_tensors(tmp_path_factory):
    """A checkpoint of many small tensors: a tensordict directory of it takes a while to write
    (one file each), long enough to signal the writer in the middle."""
    d = tmp_path_factory.mktemp("many")
    path = d / "many.pt"
    torch.save({f"t{i}": torch.full((64,), float(i)) for i in range(30000)}, path)
    return path


def temporaries(root):
    return [p for p in tree_state(str(root)) if TEMPORARY_MARK in os.path.basename(p)]


def start_directory_write(src, out):
    """Starts a convert into `out` and returns it once its temporary tree holds files.

    The writer runs at the lowest priority and each look lists two folders, not the whole tree:
    on a loaded machine (ctest -j) a look that walked the growing tree let the write finish first."""
    p = subprocess.Popen([tool("trove"), "convert", src, out, "--to", "tensordict"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=lambda: os.nice(19))
    deadline = time.monotonic() + SIGNAL_WAIT_SECONDS
    while time.monotonic() < deadline:
        trees = [n for n in os.listdir(out.parent) if TEMPORARY_MARK in n]
        if trees and len(os.listdir(out.parent / trees[0])) > 10:
            return p
        assert p.poll() is None, f"the write ended before it could be signalled: {p.returncode}"
        time.sleep(0.002)
    p.kill()
    raise AssertionError("no temporary tree appeared")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_during_write_removes_temporary(tmp_path, many_tensors, sig):
    out = tmp_path / "out"
    # An older output stays whole.
    subprocess.run([tool("trove"), "convert", small_pt(tmp_path / "m.pt"), out, "--to", "tensordict"], check=True)
    before = tree_state(str(out))
    p = start_directory_write(many_tensors, out)
    p.send_signal(sig)
    _, err = p.communicate(timeout=SIGNAL_WAIT_SECONDS)
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert b"interrupted by" in err
    assert temporaries(tmp_path) == []
    assert tree_state(str(out)) == before


def test_sigpipe_exits_128_plus_signal(tmp_path):
    src = tmp_path / "big.pt"
    torch.save({"x": torch.zeros(1 << 20)}, src)  # 4 MiB of raw bytes: far more than a pipe holds
    p = subprocess.Popen([tool("trove"), "cat", src, "x", "--raw"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.read(1) == b"\x00"
    p.stdout.close()  # what `| head -c1` does
    p.wait(timeout=SIGNAL_WAIT_SECONDS)
    assert p.returncode == 128 + signal.SIGPIPE, p.returncode


def test_killed_writers_orphan_removed_by_next_write_of_another_name(tmp_path, many_tensors):
    out = tmp_path / "killed"
    p = start_directory_write(many_tensors, out)
    p.kill()
    p.wait()
    left = temporaries(tmp_path)
    assert len(left) == 1 and os.path.basename(left[0]).startswith(".killed.trove-tmp-"), left
    other = tmp_path / "other.tdz"
    run_hostile("trove", "convert", small_pt(tmp_path / "m.pt"), other, watch=tmp_path,
                allowed=[other, left[0]], expect={0})
    assert not os.path.exists(left[0])


# ---- refresh-checksums ------------------------------------------------------------------------

class _Unseekable(io.RawIOBase):
    """Python's zipfile writes data descriptors when its output cannot seek."""

    def __init__(self):
        self.data = bytearray()

    def writable(self):
        return True

    def write(self, b):
        self.data += b
        return len(b)


def rezip(src_tdz, dst, unseekable, zip64):
    with zipfile.ZipFile(src_tdz) as z:
        entries = [(i.filename, z.read(i)) for i in z.infolist()]
    sink = _Unseekable() if unseekable else open(dst, "wb")
    with zipfile.ZipFile(sink, "w") as out:
        for name, data in entries:
            with out.open(zipfile.ZipInfo(name), "w", force_zip64=zip64) as w:
                w.write(data)
    if unseekable:
        dst.write_bytes(bytes(sink.data))
    else:
        sink.close()
    return dst


def flip_payload_byte(path, name):
    """An edit in place, as tensordict's mode="r+" makes: the payload changes, the CRCs do not."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    data[info.header_offset + 30 + name_len + extra_len] ^= 0xFF
    path.write_bytes(bytes(data))


def fill_local_headers(path):
    """Writes each entry's CRC and sizes into its local header too, beside its data descriptor
    (as some writers do; readers then check that both agree)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        for i in z.infolist():
            struct.pack_into("<III", data, i.header_offset + 14, i.CRC, i.compress_size, i.file_size)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("unseekable,zip64,filled", [(True, False, False), (False, True, False), (True, True, False),
                                                     (True, False, True)],
                         ids=["descriptor", "zip64", "descriptor-zip64", "descriptor-and-local-values"])
def test_refresh_checksums_on_every_layout(tmp_path, unseekable, zip64, filled):
    src = small_pt(tmp_path / "m.pt")
    tdz = tmp_path / "plain.tdz"
    subprocess.run([tool("trove"), "convert", src, tdz], check=True)
    archive = rezip(tdz, tmp_path / "a.tdz", unseekable, zip64)
    if filled:
        fill_local_headers(archive)
    with zipfile.ZipFile(archive) as z:
        leaf = next(i.filename for i in z.infolist() if i.filename.endswith(".memmap"))
        assert all(bool(i.flag_bits & 0x08) == unseekable for i in z.infolist())
    flip_payload_byte(archive, leaf)
    with zipfile.ZipFile(archive) as z:
        assert z.testzip() == leaf
    r = run_hostile("trove", "refresh-checksums", archive, watch=tmp_path, allowed=[archive], expect={0})
    assert f"refreshed {leaf}" in r.text
    with zipfile.ZipFile(archive) as z:
        assert z.testzip() is None
    assert subprocess.run(["unzip", "-tq", archive], capture_output=True).returncode == 0
    for cmd in (["verify", archive], ["info", archive]):
        r = run_hostile("trove", *cmd, watch=tmp_path, expect={0})


def test_refresh_checksums_of_a_sound_archive_changes_nothing(tmp_path):
    src = small_pt(tmp_path / "m.pt")
    tdz = tmp_path / "m.tdz"
    subprocess.run([tool("trove"), "convert", src, tdz], check=True)
    archive = rezip(tdz, tmp_path / "a.tdz", unseekable=True, zip64=False)
    r = run_hostile("trove", "refresh-checksums", archive, watch=tmp_path, expect={0})
    assert r.text == ""


# ---- verify of .psk.d: the same verdict as presk -----------------------------------------------

def pskd_bytes(type_text, count, payload):
    t = type_text.encode()
    return b"PSKD" + struct.pack("<HI", 1, len(t)) + t + struct.pack("<Q", count) + payload


PSKD_CASES = {
    "good": pskd_bytes("idx[4][3]", 2, bytes([1, 2, 3, 0, 1, 2])),
    "index-first-sample": pskd_bytes("idx[4][3]", 2, bytes([1, 9, 3, 0, 1, 2])),
    "index-last-sample": pskd_bytes("idx[4][3]", 2, bytes([1, 2, 3, 0, 1, 4])),
    "index-wide": pskd_bytes("idx[300][2]", 1, struct.pack("<2H", 299, 300)),
    "truncated": pskd_bytes("idx[4][3]", 3, bytes([1, 2, 3, 0, 1, 2])),
    "trailing-bytes": pskd_bytes("idx[4][3]", 1, bytes([1, 2, 3, 0])),
    "count-overflow": pskd_bytes("idx[4][3]", 1 << 62, bytes([1, 2, 3])),
    "open-type": pskd_bytes("idx[4][n]", 1, bytes([1, 2, 3])),
    "bad-version": b"PSKD" + struct.pack("<HI", 99, 4) + b"R[2]" + struct.pack("<Q", 0),
    "reals-good": pskd_bytes("ℝ[2]", 1, struct.pack("<2d", 1.5, -2)),
    "params": pskd_bytes("params MiniGPT", 1, bytes(16)),  # header only: the layout needs the program
}


def verdict_code(text):
    for code in ("E9001", "E9002", "E9003", "E9004", "E9005"):
        if code in text:
            return code
    return None


@pytest.mark.parametrize("case", sorted(PSKD_CASES))
def test_verify_and_presk_agree_on_pskd(tmp_path, case):
    path = tmp_path / f"{case}.psk.d"
    path.write_bytes(PSKD_CASES[case])
    v = run_hostile("trove", "verify", path, watch=tmp_path)
    # presk reads every sample (info with --samples beyond the count checks each one it prints).
    p = run_hostile("presk", "data", "info", path, "--samples", "1000", watch=tmp_path)
    assert (v.code == 0) == (p.code == 0), (v, p)
    if p.code != 0:
        assert verdict_code(v.text + v.errtext) == verdict_code(p.errtext), (v, p)
    assert (case in ("good", "reals-good", "params")) == (v.code == 0), v


def open_files(pid):
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:  # closed meanwhile
            pass
    return links


def test_signal_while_waiting_for_input_removes_temporary(tmp_path):
    """presk reading text from a FIFO whose writer stalls, its output open: SIGTERM stops the
    wait, removes the output's temporary and exits 128 + SIGTERM."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out.psk.d"
    p = subprocess.Popen([tool("presk"), "data", "pack", "--type", "idx[4][3]", fifo, "-o", out],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    feeder = open(fifo, "w")  # held open: presk waits for more input
    try:
        feeder.write("1 2 3\n")
        feeder.flush()
        deadline = time.monotonic() + SIGNAL_WAIT_SECONDS
        while time.monotonic() < deadline:  # until its output's unnamed temporary is open
            if any(link.startswith(str(tmp_path)) and "(deleted)" in link for link in open_files(p.pid)):
                break
            time.sleep(0.005)
        else:
            raise AssertionError("presk never opened its output")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=SIGNAL_WAIT_SECONDS)
    finally:
        feeder.close()
    assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err)
    assert b"interrupted by SIGTERM" in err
    assert not out.exists() and temporaries(tmp_path) == []


def test_refresh_checksums_leaves_an_archive_it_cannot_make_sound(tmp_path):
    """A compressed leaf whose deflate stream is damaged cannot get a right CRC: the command
    fails naming it and the archive stays byte for byte as it was."""
    src = tmp_path / "m.pt"
    torch.save({"w": torch.zeros(4096)}, src)
    archive = tmp_path / "a.tdz"
    subprocess.run([tool("trove"), "convert", src, archive, "--compression", "deflate"], check=True)
    with zipfile.ZipFile(archive) as z:
        leaf = next(i for i in z.infolist() if i.filename.endswith(".memmap"))
        assert leaf.compress_type == zipfile.ZIP_DEFLATED
    data = bytearray(archive.read_bytes())
    name_len, extra_len = struct.unpack_from("<HH", data, leaf.header_offset + 26)
    start = leaf.header_offset + 30 + name_len + extra_len
    data[start:start + 8] = b"\xff" * 8
    archive.write_bytes(bytes(data))
    r = run_hostile("trove", "refresh-checksums", archive, watch=tmp_path, expect={2})
    assert leaf.filename in r.errtext, r
    assert archive.read_bytes() == bytes(data)


def test_unpack_refuses_a_decompression_bomb_and_streams_what_it_writes(tmp_path):
    # A 1 MB .tdz whose deflated leaf inflates to 1 GiB (1028:1): unpack is a write like convert,
    # under the same expansion rule; --allow-expand writes it, streamed (no 1 GiB in memory).
    import json
    meta = {"a": {"device": "cpu", "shape": [3, 4], "dtype": "torch.float32", "is_nested": False},
            "shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"}
    bomb = tmp_path / "bomb.tdz"
    with zipfile.ZipFile(bomb, "w") as z:
        z.writestr("meta.json", json.dumps(meta))
        info = zipfile.ZipInfo("a.memmap")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as f:
            for _ in range(1024):
                f.write(bytes(1 << 20))
    out = tmp_path / "out"
    r = run_hostile("trove", "unpack", bomb, out, watch=tmp_path, expect={2})
    assert "entry 'a.memmap' inflates" in r.errtext and "kMaxInflateRatio" in r.errtext and str(bomb) in r.errtext, r
    assert not out.exists()
    code, _, err, rss = peak_rss("unpack", bomb, out, "--allow-expand")
    assert code == 0, err
    assert rss < 200 << 20, rss  # streamed: far below the 1 GiB it writes
    assert (out / "a.memmap").stat().st_size == 1 << 30
