"""Checking a download. `trove verify --sha256`: each file's digest as hashlib computes it, in sha256sum's own lines
(`sha256sum -c` reads them back), every file of a model directory, links out of it named and not
read. A shard cut short is said in the user's terms, once: which shard of how many, how much of
it is there."""
import hashlib
import json
import os
import subprocess

import torch

import conftest


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_digests_match_hashlib_and_sha256sum_checks_them(tmp_path, trove):
    model = tmp_path / "m.pt"
    torch.save({"a": torch.randn(1000, 300), "b": torch.randn(300)}, model)  # 1.2 MB: a shard per tensor
    hub = tmp_path / "hub"
    r = trove("convert", model, hub, "--max-shard-size", "500KB")
    assert r.code == 0, r
    (hub / "config.json").write_text('{"model_type": "x"}')
    sub = hub / "tokenizer"
    sub.mkdir()
    (sub / "vocab.txt").write_bytes(b"a\nb\n")
    os.symlink("/etc/hostname", hub / "outside")
    r = trove("verify", "--sha256", model, hub, cwd=tmp_path)
    assert r.code == 0, r
    lines = r.text.splitlines()
    sums = [line for line in lines if len(line) > 66 and line[64:66] == "  "]
    expected = {str(model): digest(model)}
    for f in sorted(hub.rglob("*")):
        if f.is_file() and not f.is_symlink():
            expected[str(f)] = digest(f)
    assert {line[66:]: line[:64] for line in sums} == expected
    assert any(line.startswith("# not read: ") and "outside" in line for line in lines), r.text
    # sha256sum reads the lines back.
    check = subprocess.run(["sha256sum", "-c"], input="\n".join(sums) + "\n", capture_output=True, text=True)
    assert check.returncode == 0, check
    # The same in --json, per verified path.
    r = trove("verify", "--sha256", "--json", hub)
    files = json.loads(r.out)["files"]
    got = {d["path"]: d.get("sha256") for d in files[0]["sha256"]}
    assert got[str(hub / "outside")] is None
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in expected.items() if k != str(model)}


def test_a_file_larger_than_one_read_is_hashed_whole(tmp_path, trove):
    big = tmp_path / "big.safetensors"
    data = os.urandom(9 << 20)
    header = json.dumps({"x": {"dtype": "U8", "shape": [len(data)], "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    big.write_bytes(len(header).to_bytes(8, "little") + header + data)
    r = trove("verify", "--sha256", big)
    assert r.code == 0, r
    assert f"{digest(big)}  {big}" in r.text.splitlines()


def test_a_truncated_shard_is_named_by_its_place_and_said_once(tmp_path, trove):
    model = tmp_path / "m.pt"
    torch.save({f"layer{i}.weight": torch.randn(300, 300) for i in range(5)}, model)
    hub = tmp_path / "hub"
    assert trove("convert", model, hub, "--max-shard-size", "400KB").code == 0
    third = hub / "model-00003-of-00005.safetensors"
    whole = third.stat().st_size
    os.truncate(third, 200000)
    r = trove("info", hub)
    assert r.code == 2, r
    assert "shard 3 of 5" in r.errtext and "truncated" in r.errtext, r
    assert f"200,000 of {whole:,} bytes" in r.errtext, r
    r = trove("verify", hub)
    assert r.code == 1, r
    problems = [line for line in r.text.splitlines() if "the file is truncated" in line]
    assert len(problems) == 1, r.text
    # A single file too: its size against what its header describes.
    single = tmp_path / "one.safetensors"
    assert trove("convert", model, single).code == 0
    os.truncate(single, single.stat().st_size - 1000)
    r = trove("info", single)
    assert r.code == 2 and "the file is truncated" in r.errtext and "layer4.weight" in r.errtext, r
