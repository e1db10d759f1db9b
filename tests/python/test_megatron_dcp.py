"""Megatron-Core's torch_dist checkpoints: a DCP directory (made by torch 1.13's own writer, see
dcp_writer.py), with Megatron's metadata.json and common.pt beside it. trove reads it as DCP, the
metadata.json keys as properties and common.pt's items (read as data) beside the DCP items."""

import json
import os
import pickle
import shutil
import zipfile

import pytest
import torch

from conftest import run_tool
from test_dcp import make

MEGATRON_METADATA = {"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                     "common_backend": "torch", "common_backend_version": 1}


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    d = tmp_path_factory.mktemp("megatron") / "plain"
    return d, make("plain", d)


def megatron_dir(plain, tmp_path, common, metadata=MEGATRON_METADATA):
    d = tmp_path / "iter_0000100"
    shutil.copytree(plain[0], d)
    (d / "metadata.json").write_text(metadata if isinstance(metadata, str) else json.dumps(metadata))
    torch.save(common, d / "common.pt")
    return d


def test_megatron_files_are_shown_with_the_dcp_items(trove, plain, tmp_path):
    common = {"iteration": 100, "checkpoint_version": 3.0, "rng_seed": torch.arange(5, dtype=torch.int64)}
    d = megatron_dir(plain, tmp_path, common)
    r = trove("info", d)
    assert r.code == 0, r
    for word in ("dcp", "megatron.sharded_backend", "torch_dist", "megatron.common_backend_version",
                 "iteration", "checkpoint_version", "rng_seed", "model.weight", "megatron.common_items"):
        assert word in r.text, (word, r.text)
    r = trove("cat", d, "rng_seed")
    assert r.code == 0, r
    assert "4" in r.text
    r = trove("verify", d)
    assert r.code == 0, r
    # The same directory without Megatron's files has none of it.
    r = trove("info", plain[0])
    assert r.code == 0 and "megatron." not in r.text and "rng_seed" not in r.text, r


def test_a_common_item_named_like_a_dcp_item_is_refused(trove, plain, tmp_path):
    d = megatron_dir(plain, tmp_path, {"step": 3})
    r = run_tool("trove", "info", d, limit=True)
    assert r.code != 0, r
    assert "common.pt" in r.errtext and "'step'" in r.errtext, r.errtext


def test_metadata_json_that_is_not_an_object_is_refused(trove, plain, tmp_path):
    d = megatron_dir(plain, tmp_path, {"iteration": 1}, metadata="[1, 2")
    r = run_tool("trove", "info", d, limit=True)
    assert r.code != 0, r
    assert "metadata.json" in r.errtext and "not valid JSON" in r.errtext, r.errtext


def test_deeply_nested_metadata_json_is_refused_not_a_crash(trove, plain, tmp_path):
    # 100,000 nested arrays: printing the value recursed once per level and overflowed the stack.
    deep = '{"sharded_backend": "torch_dist", "a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    d = megatron_dir(plain, tmp_path, {"iteration": 1}, metadata=deep)
    for command in (["info"], ["info", "--json"], ["verify"], ["scan"], ["convert", "--to", "pt"]):
        args = command + ([d, tmp_path / "out.pt"] if command[0] == "convert" else [d])
        r = run_tool("trove", *args, limit=True)
        assert r.code in (1, 2), (command, r)
        assert "metadata.json" in r.errtext + r.text and "nested deeper than 16" in r.errtext + r.text, (command, r)
    assert not (tmp_path / "out.pt").exists()
    # Nesting a real file could have is read.
    d2 = tmp_path / "shallow"
    shutil.copytree(d, d2)
    (d2 / "metadata.json").write_text('{"sharded_backend": "torch_dist", "a": [1, {"b": [2]}]}')
    r = trove("info", d2)
    assert r.code == 0 and '[1,{"b":[2]}]' in r.text, r


def test_code_in_common_pt_is_found_by_scan_and_refused_by_reads(trove, plain, tmp_path):
    class RunsACommand:
        def __reduce__(self):
            return (os.system, ("true",))
    d = megatron_dir(plain, tmp_path, {"iteration": 1})
    # Rewrite common.pt's data.pkl with a pickle that calls os.system.
    src = d / "common.pt"
    with zipfile.ZipFile(src) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    name = next(n for n in entries if n.endswith("/data.pkl"))
    entries[name] = pickle.dumps({"iteration": RunsACommand()}, protocol=2)
    with zipfile.ZipFile(src, "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)
    r = trove("scan", d)
    assert r.code == 1 and "system" in r.text and "common.pt@0/" in r.text, r
    r = run_tool("trove", "info", d, limit=True)
    assert r.code != 0, r
    assert "common.pt" in r.errtext and "system" in r.errtext, r.errtext
