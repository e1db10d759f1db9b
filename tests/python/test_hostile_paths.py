"""Files that name other files, special files, changing files, and writing into directories people
keep other files in (issue #25; docs/security.md, "Paths a file names" and "Never deleting").

Each case is generated here: index graphs (an index naming itself, a cycle, a diamond, a wide graph
that would be walked exponentially), indexes and shards that are links out of their directory,
the Hugging Face cache's snapshot links (which must keep working), FIFOs and devices given as inputs,
named as shards or swapped in after `trove.open`, thousands of shards under a low descriptor
limit, million-entry indexes, and conversions into a model folder holding config, tokenizer and
README files. Every command must end by itself (the suite's time and memory bounds), read nothing
it should not (no byte of a file outside the directory is ever quoted) and delete nothing it did
not write.
"""
import json
import os
import resource
import struct
import subprocess
import sys
import threading
import time
import zipfile

import pytest

from conftest import BIN_DIR, HOSTILE_SECONDS
from hostile import run_hostile

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))

import torch  # noqa: E402

import trove  # noqa: E402

SECRET = "TOP-SECRET-LINE"


def safetensors_bytes(names, fill=0.0):
    header, data, off = {}, b"", 0
    for n in names:
        header[n] = {"dtype": "F32", "shape": [2], "data_offsets": [off, off + 8]}
        data += struct.pack("<2f", fill, fill)
        off += 8
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def write_index(path, weight_map):
    path.write_text(json.dumps({"metadata": {"total_size": 8 * len(weight_map)}, "weight_map": weight_map}))


def all_commands(path, watch, expect=(0, 1, 2)):
    results = {}
    for cmd in (["info"], ["info", "--json"], ["verify"], ["scan"], ["cat", "--raw"]):
        args = cmd + [path] + (["a"] if cmd[0] == "cat" else [])
        results[" ".join(cmd)] = run_hostile("trove", *args, watch=watch, expect=set(expect))
    return results


# --- index graphs ---------------------------------------------------------------------------------

def test_index_naming_itself_is_refused_without_recursion(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    write_index(d / "model.safetensors.index.json", {"a": "model.safetensors.index.json"})
    for name, r in all_commands(d, tmp_path).items():
        assert r.code in (1, 2), (name, r)
        assert "an index never names another" in r.errtext + r.text, (name, r)
    with pytest.raises(trove.Error):
        trove.open(str(d))


def test_cycles_diamonds_and_wide_graphs_of_indexes_end_at_once(tmp_path):
    d = tmp_path / "g"
    d.mkdir()
    # 40 levels of two indexes each naming both of the next level's: 2^40 paths if walked.
    levels = 40
    for i in range(levels):
        for side in "ab":
            nxt = {f"t{i}{side}{k}": f"l{i + 1}{k}.index.json" for k in "ab"} if i + 1 < levels else {"x": "l0a.index.json"}
            write_index(d / f"l{i}{side}.index.json", nxt)
    start = time.monotonic()
    for name, r in all_commands(d / "l0a.index.json", tmp_path).items():
        assert r.code in (1, 2), (name, r)
    assert time.monotonic() - start < 5 * HOSTILE_SECONDS  # generous: each command is bounded by the suite


def test_index_link_out_of_its_directory_is_never_read(tmp_path):
    (tmp_path / "secret.txt").write_text(SECRET + "\n")
    d = tmp_path / "m"
    d.mkdir()
    (d / "model.safetensors.index.json").symlink_to(tmp_path / "secret.txt")
    for name, r in all_commands(d, tmp_path, expect=(1, 2)).items():
        assert SECRET not in r.errtext + r.text, (name, r)
        assert "symbolic link" in r.errtext + r.text, (name, r)
    # Shards that are links out (absolute or relative) are refused before anything of theirs is read.
    (tmp_path / "outside.safetensors").write_bytes(safetensors_bytes(["a"]))
    e = tmp_path / "e"
    e.mkdir()
    (e / "abs.safetensors").symlink_to(tmp_path / "outside.safetensors")
    (e / "rel.safetensors").symlink_to("../outside.safetensors")
    for shard in ("abs.safetensors", "rel.safetensors"):
        write_index(e / "model.safetensors.index.json", {"a": shard})
        r = run_hostile("trove", "info", e, watch=tmp_path, expect={2})
        # The message names the file as the directory was named plus the shard's name in it.
        assert f"'{e / shard}': leads out of its directory" in r.errtext, r
    # So does a shard that is a FIFO, for every command.
    os.unlink(e / "abs.safetensors")
    os.mkfifo(e / "abs.safetensors")
    write_index(e / "model.safetensors.index.json", {"a": "abs.safetensors"})
    for name, r in all_commands(e, tmp_path, expect=(1, 2)).items():
        assert f"'{e / 'abs.safetensors'}': is a FIFO" in r.errtext + r.text, (name, r)


def test_links_inside_the_directory_and_the_hugging_face_cache_keep_working(tmp_path):
    d = tmp_path / "m"
    (d / "real").mkdir(parents=True)
    (d / "real" / "s1.safetensors").write_bytes(safetensors_bytes(["a"], 1.0))
    (d / "s1.safetensors").symlink_to("real/s1.safetensors")
    write_index(d / "model.safetensors.index.json", {"a": "s1.safetensors"})
    assert run_hostile("trove", "cat", d, "a", watch=tmp_path, expect={0}).text.count("1.0") == 2

    # The hub cache: snapshots/<rev>/ files are relative links into the repository's blobs/.
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "0123abcd"
    (snap / "sub").mkdir(parents=True)
    (repo / "blobs" / "aaa").write_bytes(safetensors_bytes(["a"], 2.0))
    (repo / "blobs" / "bbb").write_bytes(safetensors_bytes(["b"], 3.0))
    write_index(repo / "blobs" / "iii", {"a": "model-00001-of-00002.safetensors", "b": "sub/model-00002-of-00002.safetensors"})
    (snap / "model-00001-of-00002.safetensors").symlink_to("../../blobs/aaa")
    (snap / "sub" / "model-00002-of-00002.safetensors").symlink_to("../../../blobs/bbb")
    (snap / "model.safetensors.index.json").symlink_to("../../blobs/iii")
    r = run_hostile("trove", "info", snap, watch=tmp_path, expect={0})
    assert "tensors            2" in r.text, r
    assert run_hostile("trove", "verify", snap, watch=tmp_path, expect={0})
    f = trove.open(str(snap))
    assert float(f.get_tensor("b")[0]) == 3.0
    # ... but a snapshot link leading anywhere else than that repository's blobs is refused.
    (tmp_path / "elsewhere").write_bytes(safetensors_bytes(["b"]))
    os.unlink(snap / "sub" / "model-00002-of-00002.safetensors")
    (snap / "sub" / "model-00002-of-00002.safetensors").symlink_to("../../../../../elsewhere")
    r = run_hostile("trove", "info", snap, watch=tmp_path, expect={2})
    assert "leads out of its directory" in r.errtext, r


def test_a_torch_zip_named_like_an_index_is_scanned_as_what_it_is(tmp_path):
    path = tmp_path / "model.safetensors.index.json"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R.")
        z.writestr("archive/version", "3\n")
    r = run_hostile("trove", "scan", "--fail-on", "high", path, watch=tmp_path, expect={1})
    assert "posix.system" in r.text, r
    # A bare pickle named .safetensors is scanned as the pickle it is, too.
    pkl = tmp_path / "model.safetensors"
    pkl.write_bytes(b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00true\x85R.")
    r = run_hostile("trove", "scan", "--fail-on", "high", pkl, watch=tmp_path, expect={1})
    assert "posix.system" in r.text, r


# --- descriptors and memory -----------------------------------------------------------------------

def _low_descriptor_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_thousands_of_shards_under_a_low_descriptor_limit(tmp_path):
    d = tmp_path / "many"
    d.mkdir()
    n = 600  # more than twice the hard limit below
    wm = {}
    for i in range(n):
        name = f"pytorch_model-{i + 1:05d}-of-{n:05d}.bin"
        torch.save({f"t{i}": torch.full((2,), float(i))}, d / name)
        wm[f"t{i}"] = name
    write_index(d / "pytorch_model.bin.index.json", wm)
    st = tmp_path / "many_st"
    st.mkdir()
    wm = {}
    for i in range(n):
        name = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        (st / name).write_bytes(safetensors_bytes([f"t{i}"], float(i)))
        wm[f"t{i}"] = name
    write_index(st / "model.safetensors.index.json", wm)
    for src in (d, st):
        for cmd in (["info", src], ["verify", src], ["scan", src], ["convert", src, tmp_path / "out.safetensors"]):
            p = subprocess.run([os.path.join(BIN_DIR, "trove")] + [str(c) for c in cmd], capture_output=True,
                               timeout=120, preexec_fn=_low_descriptor_limit)
            assert p.returncode == 0, (cmd, p.stderr[-400:])
            assert b"Too many open files" not in p.stderr
        out = subprocess.run([os.path.join(BIN_DIR, "trove"), "cat", tmp_path / "out.safetensors", "t599"],
                             capture_output=True, text=True)
        assert "599.0" in out.stdout


def test_an_index_of_a_million_entries_is_read_in_bounded_memory(tmp_path):
    d = tmp_path / "big"
    d.mkdir()
    n = 1_000_000
    with open(d / "model.safetensors.index.json", "w") as f:
        f.write('{"metadata": {"total_size": 1}, "weight_map": {')
        f.write(",".join(f'"layers.{i // 1000}.experts.{i % 1000}.w": "m-{i % 100:05d}.safetensors"'
                         for i in range(n)))
        f.write("}}")
    # The shards are missing: the index is parsed whole (every entry held), then the first shard
    # is not found. The suite's 1 GiB address-space bound holds the parse.
    r = run_hostile("trove", "info", d, watch=tmp_path, expect={2})
    assert "m-00000.safetensors" in r.errtext and "No such file" in r.errtext, r


# --- special files --------------------------------------------------------------------------------

def test_fifos_are_refused_never_waited_on(tmp_path):
    fifo = tmp_path / "model.pt"
    os.mkfifo(fifo)
    for cmd in (["info"], ["verify"], ["scan"], ["stats"], ["cat", "--raw"], ["convert"]):
        args = cmd + [fifo] + (["x"] if cmd[0] == "cat" else []) + ([tmp_path / "o.pt"] if cmd[0] == "convert" else [])
        r = run_hostile("trove", *args, watch=tmp_path, expect={2})
        assert "FIFO" in r.errtext, (cmd, r)
    with pytest.raises(trove.Error, match="FIFO"):
        trove.open(str(fifo))
    with pytest.raises(trove.Error, match="FIFO"):
        trove.load(str(fifo))
    # Named as a shard.
    d = tmp_path / "m"
    d.mkdir()
    os.mkfifo(d / "s.safetensors")
    write_index(d / "model.safetensors.index.json", {"a": "s.safetensors"})
    for name, r in all_commands(d, tmp_path, expect=(1, 2)).items():
        assert "FIFO" in r.errtext + r.text, (name, r)


def test_a_shard_swapped_for_a_fifo_after_open_is_an_error(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "s.safetensors").write_bytes(safetensors_bytes(["a"], 5.0))
    write_index(d / "model.safetensors.index.json", {"a": "s.safetensors"})
    f = trove.open(str(d))  # headers read, nothing mapped yet
    os.unlink(d / "s.safetensors")
    os.mkfifo(d / "s.safetensors")
    result = {}

    def read():
        try:
            f.get_tensor("a")
            result["r"] = "read"
        except trove.Error as e:
            result["r"] = str(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(HOSTILE_SECONDS)
    assert not t.is_alive(), "get_tensor blocked on a FIFO swapped in for a shard"
    assert "FIFO" in result["r"], result


def test_a_device_named_as_a_tensordict_leaf_is_never_opened(tmp_path):
    d = tmp_path / "td"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({
        "x": {"device": "cpu", "shape": [4], "dtype": "torch.float32", "is_nested": False},
        "shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"}))
    try:
        os.mknod(d / "x.memmap", 0o600 | 0o020000, os.makedev(1, 3))  # a character device: /dev/null's numbers
    except PermissionError:
        pytest.skip("making a device node needs root")
    strace = subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat", os.path.join(BIN_DIR, "trove"),
                             "info", str(d)], capture_output=True, text=True, timeout=60)
    assert "not a regular file" in strace.stderr
    opened = [line for line in strace.stderr.splitlines() if "x.memmap" in line and "openat" in line and "= -1" not in line]
    assert not opened, opened


# --- writing into folders people keep other files in -------------------------------------------------

def model_folder(path):
    path.mkdir()
    keep = {"config.json": '{"model_type": "llama"}', "tokenizer.json": "{}", "README.md": "# my model\n",
            "generation_config.json": "{}"}
    for name, text in keep.items():
        (path / name).write_text(text)
    return keep


def test_converting_into_a_model_folder_keeps_every_file_it_did_not_write(tmp_path):
    src = tmp_path / "m.pt"
    torch.save({f"layer{i}.weight": torch.randn(64, 64) for i in range(6)}, src)
    out = tmp_path / "model"
    keep = model_folder(out)

    def contents():
        return {p.name: p.read_bytes() for p in out.iterdir()}

    def convert(*args, expect={0}):
        r = run_hostile("trove", "convert", src, out, *args, watch=tmp_path, allowed=[out], expect=expect)
        for name, text in keep.items():
            assert (out / name).read_text() == text, (args, name)
        return r

    convert("--to", "safetensors", "--max-shard-size", "40KB")  # 3 shards of two 16 KiB tensors, an index
    assert run_hostile("trove", "diff", src, out, watch=tmp_path, expect={0})
    # Another layout of the same names would leave those shards to be read with the new ones:
    # save_pretrained deletes them, trove deletes nothing it did not write: refused, nothing changed.
    for size in ("50KB", "10MB"):  # 2 shards; one file
        before = contents()
        r = convert("--to", "safetensors", "--max-shard-size", size, expect={2})
        assert "model-00001-of-00003.safetensors" in r.errtext and "deletes no file" in r.errtext, r
        assert contents() == before
    # The user removes them; then the other layout is written.
    for name in os.listdir(out):
        if name.startswith("model-") or name == "model.safetensors.index.json":
            os.unlink(out / name)
    convert("--to", "safetensors", "--max-shard-size", "10MB")  # one file
    convert("--to", "pt", "--max-shard-size", "40KB")           # .bin shards beside it (their own names)
    assert run_hostile("trove", "diff", src, out / "model.safetensors", watch=tmp_path, expect={0})
    names = sorted(os.listdir(out))
    assert "model.safetensors" in names and not any(n.startswith("model-") for n in names), names
    assert "pytorch_model.bin.index.json" in names
    # A tree format never replaces the folder, nor does a file output.
    for args in (["--to", "tensordict"], ["--to", "safetensors"], ["--to", "pt"]):
        r = run_hostile("trove", "convert", src, out, *args, watch=tmp_path, expect={2})
        assert "never" in r.errtext or "is a directory" in r.errtext, r
    for name, text in keep.items():
        assert (out / name).read_text() == text
    # Python's writers follow the same rule.
    with pytest.raises(trove.Error):
        trove.save({"a": torch.zeros(2)}, str(out), format="tensordict")
    before = contents()
    with pytest.raises(trove.RefusedError, match="model.safetensors of another sharding"):  # the single file
        trove.convert(str(src), str(out), to="safetensors", max_shard_size="40KB")
    assert contents() == before


def test_resharding_a_folder_in_place_keeps_the_source_and_other_files(tmp_path):
    out = tmp_path / "model"
    keep = model_folder(out)
    torch.save({f"w{i}": torch.randn(64, 64) for i in range(4)}, out / "pytorch_model.bin")
    before = torch.load(out / "pytorch_model.bin")
    run_hostile("trove", "convert", out / "pytorch_model.bin", out, "--to", "pt", "--max-shard-size", "20KB",
                watch=tmp_path, allowed=[out], expect={0})
    # The single file is of the same naming, but it is the source: it stays.
    assert (out / "pytorch_model.bin").exists()
    for name, text in keep.items():
        assert (out / name).read_text() == text
    after = trove.load(str(out / "pytorch_model.bin.index.json"))
    assert set(after) == set(before) and all(torch.equal(after[k], before[k]) for k in before)


def test_convert_onto_itself_replaces_the_file_in_place(tmp_path):
    src = tmp_path / "m.pt"
    torch.save({"w": torch.arange(6.0)}, src)
    run_hostile("trove", "convert", src, src, "--dtype", "bfloat16", watch=tmp_path, allowed=[src], expect={0})
    assert torch.load(src)["w"].dtype == torch.bfloat16
    tdz = tmp_path / "m.tdz"
    run_hostile("trove", "convert", src, tdz, watch=tmp_path, allowed=[tdz], expect={0})
    run_hostile("trove", "convert", tdz, tdz, watch=tmp_path, allowed=[tdz], expect={0})
    d = tmp_path / "d"
    run_hostile("trove", "convert", src, d, "--to", "tensordict", watch=tmp_path, allowed=[d], expect={0})
    run_hostile("trove", "convert", d, d, "--to", "tensordict", watch=tmp_path, allowed=[d], expect={0})
    for other in (tdz, d):
        assert run_hostile("trove", "diff", src, other, watch=tmp_path, expect={0})
