"""Hostile and careless cases of mapped reads (docs/security.md, "Truncation under a mapping",
"Resource caps").

1. A file shrinking under a running command: every command that maps its input ends with
   `FILE: changed while being read`, exit 2, and leaves no temporary. The truncation is made at a
   controlled moment: the command is stopped (SIGSTOP) as soon as it is seen holding a mapping of
   the victim, the victim is truncated, and the command continues. The inputs are made so that
   plenty of mapped reading is left at that point, so an exit 0 would mean the change was missed;
   a command that finished before it could be caught is run again, and the case fails unless the
   error was seen. Without the guard these commands die of SIGBUS, which run_hostile refuses.
2. Small files that expand: a .tdz of deflated zeros that inflate to 2 GB, two such archives
   diffed leaf by leaf (side by side, never held), deeply nested entry names, a tensordict
   directory declaring millions of nested-tensor components, and stride-0 views (a huge tensor
   over a tiny storage), all under run_hostile's 1 GiB and 20 s.
"""
import json
import os
import signal
import threading
import time
import zipfile

import pytest
import torch

from conftest import run_tool
from hostile import run_hostile

CHANGED = "changed while being read"


# ---- truncating at a controlled moment ---------------------------------------------------------

def _children():
    me = str(os.getpid())
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            out.append(int(pid))
    return out


def _holds(pid, victim):
    """"mapped" when process pid maps the file `victim` (by device and inode), "open" when it only
    has it open, None otherwise."""
    st = os.stat(victim)
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x} {st.st_ino} "
    try:
        with open(f"/proc/{pid}/maps") as f:
            if any(want in line for line in f):
                return "mapped"
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.stat(f"/proc/{pid}/fd/{fd}").st_ino == st.st_ino:
                    return "open"
            except OSError:
                pass
    except OSError:
        pass
    return None


def _stopped(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def _truncate_when_mapped(victim, size, state):
    """Stops the command being run as soon as it holds a mapping of victim, truncates victim to
    `size` bytes, and lets it go on. state["truncated"] says whether that happened."""
    deadline = time.monotonic() + 15
    pid = None
    while pid is None and time.monotonic() < deadline:
        kids = _children()
        pid = kids[0] if kids else None
    while pid is not None and time.monotonic() < deadline:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        while not _stopped(pid):
            if not os.path.exists(f"/proc/{pid}"):
                return
        mapped = _holds(pid, victim)
        if mapped:
            os.truncate(victim, size)
            state["truncated"] = mapped
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        if mapped:
            return
        time.sleep(0.0002)


def truncated_mid_run(tool, *args, victim, make, watch, allowed=(), size=0, attempts=8):
    """Runs the command with `victim` truncated under it (see the top of this file) until the
    truncation lands while it is mapped; `make()` rebuilds the inputs before each attempt. The
    command must then end with the guard's error naming victim. Returns the Result."""
    for _ in range(attempts):
        make()
        state = {}
        t = threading.Thread(target=_truncate_when_mapped, args=(str(victim), size, state))
        t.start()
        try:
            r = run_hostile(tool, *args, watch=watch, allowed=allowed, expect={0, 1, 2})
        finally:
            t.join()
        if not state.get("truncated"):
            continue  # finished before it was seen mapping the victim: try again
        if state["truncated"] == "open" and CHANGED not in r.errtext:
            continue  # caught between open and map: it read a shorter file, so nothing changed under it
        assert r.code == 2, f"exit {r.code} although {victim} was truncated mid-run: {r!r}"
        assert CHANGED in r.errtext and str(victim) in r.errtext, r.errtext
        return r
    pytest.fail(f"{tool} {args}: never caught holding a mapping of {victim}")


# ---- inputs ------------------------------------------------------------------------------------

BIG = 48 * 1024 * 1024  # float32 elements: 192 MiB, long enough to be caught mid-read


def save_big_pt(path, elements=BIG, extra=None):
    state = {"w": torch.arange(elements, dtype=torch.float32)}
    if extra:
        state.update(extra)
    torch.save(state, path)


def big_pickle_pt(path):
    # info reads only metadata: make that metadata long (a pickle of a few MB of values).
    torch.save({"w": torch.zeros(4), "values": [float(i) for i in range(1_500_000)]}, path)


def make_input(tool, *args):
    """Makes an input (not under test: no time bound)."""
    r = run_tool(tool, *args)
    assert r.code == 0, r


# ---- 1. truncation, one command each -----------------------------------------------------------

def test_info_pt_truncated(tmp_path):
    f = tmp_path / "m.pt"
    truncated_mid_run("trove", "info", f, victim=f, make=lambda: big_pickle_pt(f), watch=tmp_path, allowed=[f])


def test_info_json_pt_truncated(tmp_path):
    f = tmp_path / "m.pt"
    truncated_mid_run("trove", "info", f, "--json", victim=f, make=lambda: big_pickle_pt(f), watch=tmp_path,
                      allowed=[f])


def test_cat_pt_truncated(tmp_path):
    f = tmp_path / "m.pt"
    truncated_mid_run("trove", "cat", f, "w", "--json", victim=f, make=lambda: save_big_pt(f), watch=tmp_path,
                      allowed=[f])


def test_verify_pt_truncated(tmp_path):
    f = tmp_path / "m.pt"
    truncated_mid_run("trove", "verify", f, victim=f, make=lambda: save_big_pt(f), watch=tmp_path, allowed=[f])


def test_scan_pt_truncated(tmp_path):
    f = tmp_path / "m.pt"
    truncated_mid_run("trove", "scan", f, victim=f, make=lambda: big_pickle_pt(f), watch=tmp_path, allowed=[f])


def test_diff_pt_truncated(tmp_path):
    f, g = tmp_path / "a.pt", tmp_path / "b.pt"

    def make():
        save_big_pt(f)
        save_big_pt(g)
    truncated_mid_run("trove", "diff", f, g, victim=f, make=make, watch=tmp_path, allowed=[f, g])


@pytest.mark.parametrize("target", ["out.pt", "out.tdz", "outdir"])
def test_convert_pt_truncated(tmp_path, target):
    f = tmp_path / "m.pt"
    out = tmp_path / target
    # A cast reads every element in this process (no kernel copy): the mapping is what is read.
    extra = ["--to", "tensordict"] if target == "outdir" else []
    truncated_mid_run("trove", "convert", f, out, "--dtype", "float64", *extra, victim=f,
                      make=lambda: save_big_pt(f), watch=tmp_path, allowed=[f])
    assert not out.exists()


def test_unpack_truncated(tmp_path):
    f = tmp_path / "m.tdz"
    src = tmp_path / "src.pt"
    out = tmp_path / "out"

    def make():
        if not src.exists():
            save_big_pt(src)
        make_input("trove", "convert", src, f)
    truncated_mid_run("trove", "unpack", f, out, victim=f, make=make, watch=tmp_path, allowed=[f, src])
    assert not out.exists()


def test_pack_truncated(tmp_path):
    d = tmp_path / "td"
    src = tmp_path / "src.pt"
    out = tmp_path / "out.tdz"

    def make():
        if not src.exists():
            save_big_pt(src, elements=BIG // 16)
        make_input("trove", "convert", src, d, "--to", "tensordict")
    # deflate reads the leaf in this process (a stored copy could be made by the kernel)
    truncated_mid_run("trove", "pack", d, out, "--compression", "deflate", victim=d / "w.memmap", make=make,
                      watch=tmp_path, allowed=[d, src])
    assert not out.exists()


def test_cat_tdz_truncated(tmp_path):
    f = tmp_path / "m.tdz"
    src = tmp_path / "src.pt"

    def make():
        if not src.exists():
            save_big_pt(src)
        make_input("trove", "convert", src, f)
    truncated_mid_run("trove", "cat", f, "w", "--json", victim=f, make=make, watch=tmp_path, allowed=[f, src])


def test_cat_directory_leaf_truncated(tmp_path):
    d = tmp_path / "td"
    src = tmp_path / "src.pt"

    def make():
        if not src.exists():
            save_big_pt(src)
        make_input("trove", "convert", src, d, "--to", "tensordict")
    truncated_mid_run("trove", "cat", d, "w", "--json", victim=d / "w.memmap", make=make, watch=tmp_path,
                      allowed=[d, src])


def make_pskd(tmp_path, path):
    # 2M samples of an 8-element vector: a .psk.d of 64 MiB.
    src = tmp_path / "rows.pt"
    if not src.exists():
        torch.save({"x": torch.rand(2_000_000, 8, dtype=torch.float32)}, src)
    make_input("trove", "convert", src, path)


@pytest.mark.parametrize("command", ["export", "batches", "info", "diff"])
def test_data_commands_truncated(tmp_path, command):
    f = tmp_path / "x.psk.d"
    g = tmp_path / "y.psk.d"
    out = tmp_path / "out.json"

    def make():
        make_pskd(tmp_path, f)
        if command == "diff" and not g.exists():
            make_pskd(tmp_path, g)
    args = {"export": ["export", f, "-o", out],
            "batches": ["batches", f, "--batch", "1000", "--read"],
            "info": ["info", f, "--samples", "2000000"],
            "diff": ["diff", f, g]}[command]
    truncated_mid_run("trove", "data", *args, victim=f, make=make, size=4096, watch=tmp_path,
                      allowed=[f, g, tmp_path / "rows.pt"])
    assert not out.exists()


# ---- 2. small files that inflate ---------------------------------------------------------------

def td_meta(leaves, subdirs=()):
    meta = {name: {"device": "cpu", "shape": list(shape), "dtype": f"torch.{dtype}", "is_nested": False}
            for name, (shape, dtype) in leaves.items()}
    for d in subdirs:
        meta[d] = {"type": "TensorDict"}
    meta.update({"shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>",
                 "_format_version": 1, "_class": "tensordict:TensorDict"})
    return json.dumps(meta)


BOMB_LEAF_BYTES = 512 << 20   # four leaves of zeros: 2 GiB inflated, a few MB deflated
BOMB_LEAVES = 4


@pytest.fixture(scope="module")
def inflate_bomb(tmp_path_factory):
    path = tmp_path_factory.mktemp("bomb") / "bomb.tdz"
    zeros = bytes(16 << 20)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        leaves = {f"x{i}": ([BOMB_LEAF_BYTES // 4], "float32") for i in range(BOMB_LEAVES)}
        z.writestr("meta.json", td_meta(leaves))
        for i in range(BOMB_LEAVES):
            with z.open(f"x{i}.memmap", "w", force_zip64=True) as f:
                for _ in range(BOMB_LEAF_BYTES // len(zeros)):
                    f.write(zeros)
    assert path.stat().st_size < 16 << 20
    return path


@pytest.mark.parametrize("command", [["info"], ["info", "--json"], ["verify"], ["scan"],
                                     ["cat", "x0"], ["cat", "x0", "--raw"], ["cat", "x0", "--json"]])
def test_inflate_bomb_is_never_held(inflate_bomb, tmp_path, command):
    args = [command[0], inflate_bomb] + command[1:]
    if command[0] == "cat" and command[-1] in ("--raw", "--json"):
        # Writing the whole leaf out is the expansion rule's to refuse (1028:1 is a bomb's ratio)...
        r = run_hostile("trove", *args, watch=inflate_bomb.parent, expect={2})
        assert "kMaxInflateRatio" in r.errtext and "x0" in r.errtext and "1028:1" in r.errtext, r.errtext
        # ...and when asked for, it streams to a file in bounded memory (the address-space limit
        # is 1 GiB).
        out = tmp_path / "out"
        with open(out, "wb") as sink:
            import subprocess
            from conftest import BIN_DIR, _limit_memory
            p = subprocess.run([os.path.join(BIN_DIR, "trove")] + [str(a) for a in args] + ["--allow-expand"], stdout=sink,
                               stderr=subprocess.PIPE, preexec_fn=_limit_memory, timeout=120)
        assert p.returncode == 0, p.stderr
        size = out.stat().st_size
        assert size == BOMB_LEAF_BYTES if command[-1] == "--raw" else size > BOMB_LEAF_BYTES // 4
        return
    r = run_hostile("trove", *args, watch=inflate_bomb.parent, expect={0, 1})
    if command[0] == "verify":
        assert r.code == 0, r
    if command == ["info", "--json"]:
        info = json.loads(r.out)
        assert sorted(t["key"] for t in info["tensors"]) == [f"x{i}" for i in range(BOMB_LEAVES)]
        assert all(t["nbytes"] == BOMB_LEAF_BYTES for t in info["tensors"])


LEAF_FLOATS = (512 << 20) // 4  # each leaf 512 MiB of float32 inflated: two held whole exceed the limit
POKED = 20 * (4 << 20) + 1234      # the one element that differs


@pytest.fixture(scope="module")
def compressed_pair(tmp_path_factory):
    """Two deflated .tdz of a few MB each: leaf `same` is zeros in both, leaf `poked` is zeros
    but for one element 1.0 in b."""
    d = tmp_path_factory.mktemp("pair")
    chunk = 4 << 20  # floats per write
    for name, poke in (("a.tdz", False), ("b.tdz", True)):
        with zipfile.ZipFile(d / name, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            z.writestr("meta.json", td_meta({"same": ([LEAF_FLOATS], "float32"), "poked": ([LEAF_FLOATS], "float32")}))
            for leaf in ("same", "poked"):
                with z.open(f"{leaf}.memmap", "w", force_zip64=True) as f:
                    for first in range(0, LEAF_FLOATS, chunk):
                        block = bytearray(chunk * 4)
                        if poke and leaf == "poked" and first <= POKED < first + chunk:
                            block[(POKED - first) * 4:(POKED - first + 1) * 4] = b"\x00\x00\x80\x3f"  # 1.0f
                        f.write(block)
        assert (d / name).stat().st_size < 16 << 20
    return d


def test_diff_of_compressed_leaves_streams(compressed_pair):
    # Both archives' leaves are inflated side by side, window by window: holding one pair whole
    # would take the whole 1 GiB limit.
    a, b = compressed_pair / "a.tdz", compressed_pair / "b.tdz"
    r = run_hostile("trove", "diff", a, b, "--json", watch=compressed_pair, expect={1})
    report = json.loads(r.out)
    assert report["equal"] is False and not report["only_in_a"] and not report["only_in_b"]
    by_key = {t["key"]: t for t in report["tensors"]}
    assert by_key["same"]["identical"] is True and by_key["same"]["within_tolerance"] is True
    poked = by_key["poked"]
    assert poked["identical"] is False and poked["elements_differing"] == 1
    assert poked["max_abs"] == 1.0 and poked["l2"] == 1.0
    r = run_hostile("trove", "diff", b, b, watch=compressed_pair, expect={0})
    assert r.text.startswith("equal: 2 common tensors (2 identical)"), r


def test_stats_and_verify_of_compressed_leaves_stream(compressed_pair):
    b = compressed_pair / "b.tdz"
    r = run_hostile("trove", "stats", b, "--json", watch=compressed_pair, expect={0})
    rows = {t["key"]: t for t in json.loads(r.out)["tensors"]}
    assert rows["poked"]["count"] == LEAF_FLOATS and rows["poked"]["max"] == 1.0
    assert rows["poked"]["zeros"] == LEAF_FLOATS - 1 and rows["same"]["zeros"] == LEAF_FLOATS
    run_hostile("trove", "verify", b, watch=compressed_pair, expect={0})


def test_deeply_nested_entry_names(tmp_path):
    # Entries whose names have ~30000 components each: its directories must not be listed whole.
    f = tmp_path / "deep.tdz"
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("meta.json", td_meta({"x": ([1], "float32")}))
        z.writestr("x.memmap", b"\0" * 4)
        for c in "abc":
            z.writestr(f"{c}/" * 32000 + "x.memmap", b"\0" * 4)
    assert f.stat().st_size < 1 << 20
    for command in (["info"], ["info", "--json"], ["verify"], ["scan"], ["cat", "x"]):
        run_hostile("trove", command[0], f, *command[1:], watch=tmp_path, expect={0})


@pytest.mark.parametrize("command", [["info"], ["info", "--json"], ["verify"], ["scan"]])
def test_millions_of_nested_components(tmp_path, command):
    # meta.json declares two million components; the sizes file is sparse zeros (empty
    # components), the data file empty: a few hundred bytes on disk.
    d = tmp_path / "td"
    d.mkdir()
    meta = json.loads(td_meta({}))
    meta["x"] = {"device": "cpu", "shape": [2_000_000, 1], "dtype": "torch.float32", "is_nested": True}
    (d / "meta.json").write_text(json.dumps(meta))
    with open(d / "x.shape.memmap", "wb") as s:
        s.truncate(2_000_000 * 8)
    (d / "x.memmap").write_bytes(b"")
    r = run_hostile("trove", command[0], d, *command[1:], watch=tmp_path, expect={1, 2})
    assert "kMaxNestedComponents" in r.errtext + r.text, r


# ---- 3. views that expand ----------------------------------------------------------------------

EXPANDED = (1 << 15, 1 << 15)  # 2^30 float32 elements, 4 GiB logically, over one stored element


@pytest.fixture(scope="module")
def expanded(tmp_path_factory):
    d = tmp_path_factory.mktemp("expanded")
    for name in ("e.pt", "f.pt"):
        torch.save({"x": torch.full((1,), 3.0).expand(*EXPANDED), "small": torch.zeros(3).expand(4, 3)}, d / name)
    assert (d / "e.pt").stat().st_size < 1 << 20
    return d


def test_expanded_cat_at_a_glance(expanded, tmp_path):
    r = run_hostile("trove", "cat", expanded / "e.pt", "x", watch=expanded, expect={0})
    assert r.text.startswith("x: float32 [32768, 32768]") and "..." in r.text


@pytest.mark.parametrize("flag", ["--raw", "--json"])
def test_expanded_cat_whole_is_refused(expanded, flag):
    r = run_hostile("trove", "cat", expanded / "e.pt", "x", flag, watch=expanded, expect={2})
    assert "kMaxExpandRatio" in r.errtext and "--allow-expand" in r.errtext, r


def test_small_broadcast_cat_whole_is_fine(expanded):
    r = run_hostile("trove", "cat", expanded / "e.pt", "small", "--json", watch=expanded, expect={0})
    assert json.loads(r.out)["data"] == [[0.0] * 3] * 4


@pytest.mark.parametrize("target", ["out.tdz", "outdir", "out.psk.d"])
def test_expanded_convert_without_strides_is_refused(expanded, tmp_path, target):
    out = tmp_path / target
    extra = ["--to", "tensordict"] if target == "outdir" else []
    r = run_hostile("trove", "convert", expanded / "e.pt", out, *extra, watch=tmp_path, expect={2})
    assert "kMaxExpandRatio" in r.errtext, r
    assert not out.exists()


def test_expanded_convert_to_pt_keeps_the_view(expanded, tmp_path):
    out = tmp_path / "out.pt"
    run_hostile("trove", "convert", expanded / "e.pt", out, watch=tmp_path, allowed=[out], expect={0})
    assert out.stat().st_size < 1 << 20
    t = torch.load(out)["x"]
    assert tuple(t.shape) == EXPANDED and t.stride() == (0, 0) and float(t[123, 456]) == 3.0


@pytest.mark.parametrize("other", ["e.pt", "f.pt"])
def test_expanded_diff_and_verify(expanded, other):
    r = run_hostile("trove", "diff", expanded / "e.pt", expanded / other, watch=expanded, expect={0})
    assert r.text.strip().startswith("equal"), r
    run_hostile("trove", "verify", expanded / "e.pt", watch=expanded, expect={0})
    run_hostile("trove", "info", expanded / "e.pt", "--json", watch=expanded, expect={0})
