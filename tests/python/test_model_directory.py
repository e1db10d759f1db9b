"""The Hugging Face model-directory workflow as a user runs it: convert carries config.json and
generation_config.json into a directory of shards (never replacing a file trove did not write),
says what it wrote on a terminal and nothing in a pipe."""
import json
import re

import pytest
import torch

from test_diff_cli import on_terminal


@pytest.fixture
def model_dir(tmp_path):
    torch.manual_seed(0)
    d = tmp_path / "hub_model"
    d.mkdir()
    sd = {"model.embed.weight": torch.randn(64, 16), "model.norm.weight": torch.ones(16),
          "lm_head.weight": torch.randn(64, 16)}
    torch.save(sd, d / "pytorch_model.bin")
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 16}))
    (d / "generation_config.json").write_text(json.dumps({"max_new_tokens": 7}))
    (d / "tokenizer.json").write_text("{}")
    (d / "README.md").write_text("# a model\n")
    return d


def test_convert_into_a_new_directory_carries_the_config_files(tmp_path, model_dir, trove):
    out = tmp_path / "out"
    r = trove("convert", model_dir / "pytorch_model.bin", out, "--max-shard-size", "5KB")
    assert r.code == 0, r
    names = sorted(p.name for p in out.iterdir())
    assert names == ["config.json", "generation_config.json", "model-00001-of-00002.safetensors",
                     "model-00002-of-00002.safetensors", "model.safetensors.index.json"], names
    assert (out / "config.json").read_bytes() == (model_dir / "config.json").read_bytes()
    assert (out / "generation_config.json").read_bytes() == (model_dir / "generation_config.json").read_bytes()
    # From a sharded directory too (the index's directory is the model's).
    again = tmp_path / "again"
    assert trove("convert", out, again, "--max-shard-size", "1GB").code == 0
    assert sorted(p.name for p in again.iterdir()) == ["config.json", "generation_config.json", "model.safetensors"]


def test_an_existing_config_is_never_replaced(tmp_path, model_dir, trove):
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}')
    r = trove("convert", model_dir / "pytorch_model.bin", out, "--max-shard-size", "1GB")
    assert r.code == 0, r
    assert (out / "config.json").read_text() == '{"mine": true}'
    assert "config.json differs from" in r.errtext and "left as it is" in r.errtext, r.errtext
    assert (out / "generation_config.json").exists()
    # Converted in place (into the source's own directory): the same files, no note.
    r = trove("convert", model_dir / "pytorch_model.bin", model_dir, "--max-shard-size", "1GB")
    assert r.code == 0 and "left as it is" not in r.errtext, r
    assert (model_dir / "model.safetensors").exists()


def test_a_single_output_file_gets_no_neighbours(tmp_path, model_dir, trove):
    out = tmp_path / "single"
    out.mkdir()
    assert trove("convert", model_dir / "pytorch_model.bin", out / "model.safetensors").code == 0
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]


@pytest.mark.parametrize("columns", [80, 120])
def test_convert_says_what_it_wrote_on_a_terminal_only(tmp_path, model_dir, trove, columns):
    out = tmp_path / "model.safetensors"
    shown = on_terminal(["convert", model_dir / "pytorch_model.bin", out], columns)
    line = re.search(r"wrote (\S+): 3 tensors, 8\.06 KiB in [0-9]+\.[0-9] s\n", shown)
    assert line and line.group(1) == str(out), shown
    assert shown.count("wrote ") == 1, shown
    # In a pipe nothing is said; with --json the JSON alone.
    r = trove("convert", model_dir / "pytorch_model.bin", out)
    assert r.code == 0 and r.errtext == "" and r.text == "", r
    shown = on_terminal(["convert", model_dir / "pytorch_model.bin", out, "--json"], columns)
    assert "wrote " not in shown and json.loads(shown)["tensors"] == 3, shown


def test_info_of_a_sharded_checkpoint_has_a_shard_column(tmp_path, model_dir, trove):
    out = tmp_path / "out"
    assert trove("convert", model_dir / "pytorch_model.bin", out, "--max-shard-size", "5KB").code == 0
    text = trove("info", out).text
    header = next(line for line in text.splitlines() if line.split()[:2] == ["key", "dtype"])
    assert header.split() == ["key", "dtype", "shape", "bytes", "shard", "shared", "view"], text
    rows = {line.split()[0]: next(w for w in line.split() if w.endswith(".safetensors")) for line in text.splitlines() if line.startswith("  model.") or
            line.startswith("  lm_head")}
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert rows == index, text
    # A single file keeps its storage column.
    single = trove("info", model_dir / "pytorch_model.bin").text
    assert any(line.split()[:5] == ["key", "dtype", "shape", "bytes", "storage"] for line in single.splitlines()), single


def test_info_json_names_each_tensors_shard(tmp_path, model_dir, trove):
    out = tmp_path / "out"
    assert trove("convert", model_dir / "pytorch_model.bin", out, "--max-shard-size", "5KB").code == 0
    info = json.loads(trove("info", out, "--json").out)
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert {t["name"]: t["shard"] for t in info["tensors"]} == index and len(set(index.values())) > 1, info["tensors"]
    # .bin shards: the shard file, not the storage record inside it.
    bins = tmp_path / "bins"
    assert trove("convert", model_dir / "pytorch_model.bin", bins, "--max-shard-size", "5KB", "--to", "pt").code == 0
    info = json.loads(trove("info", bins, "--json").out)
    index = json.loads(next(bins.glob("*.index.json")).read_text())["weight_map"]
    assert {t["name"]: t["shard"] for t in info["tensors"]} == index, info["tensors"]
    # A single file has no shards.
    single = json.loads(trove("info", model_dir / "pytorch_model.bin", "--json").out)
    assert all("shard" not in t for t in single["tensors"])


def test_names_are_shown_verbatim_and_cat_takes_them_back(tmp_path, trove):
    import safetensors_spec

    st = tmp_path / "names.safetensors"
    st.write_bytes(safetensors_spec.write({"model/x": ("U8", [1], b"\x05"), "rate%": ("U8", [1], b"\x06")}))
    text = trove("info", st).text
    assert "model/x" in text and "rate%" in text and "%2F" not in text and "%25" not in text, text
    for name, value in (("model/x", 5), ("rate%", 6)):
        r = trove("cat", st, name, "--json")
        assert r.code == 0 and json.loads(r.text)["data"] == [value], r
    # A nested .pt name holding '/': key path model/x%2Fy, shown and found as model/x/y.
    pt = tmp_path / "nested.pt"
    torch.save({"model": {"x/y": torch.tensor([7], dtype=torch.uint8)}}, pt)
    text = trove("info", pt).text
    assert "model/x/y" in text and "%2F" not in text, text
    r = trove("cat", pt, "model/x/y", "--json")
    assert r.code == 0 and json.loads(r.text)["data"] == [7], r


def test_files_of_another_sharding_are_refused_never_deleted(tmp_path, model_dir, trove):
    # A folder holding shards of another layout (or files merely named like them): save_pretrained
    # would delete them; trove deletes no file it did not write, so it refuses and writes nothing.
    out = tmp_path / "out"
    out.mkdir()
    (out / "model-00001-of-00003.safetensors").write_text("mine")
    (out / "model.safetensors.index.json").write_text("my notes")
    (out / "keep.txt").write_text("kept")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for size in ("5KB", "1GB"):  # two shards (the index is the new layout's, the shard is not), one file
        r = trove("convert", model_dir / "pytorch_model.bin", out, "--max-shard-size", size)
        assert r.code == 2 and "model-00001-of-00003.safetensors" in r.errtext and str(out) in r.errtext, r
        assert "deletes no file it did not write" in r.errtext, r
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert "model.safetensors.index.json" in trove("convert", model_dir / "pytorch_model.bin", out,
                                                   "--max-shard-size", "1GB").errtext
    # Once the user has removed them, the same command writes the shards beside the other files.
    (out / "model-00001-of-00003.safetensors").unlink()
    (out / "model.safetensors.index.json").unlink()
    r = trove("convert", model_dir / "pytorch_model.bin", out, "--max-shard-size", "5KB")
    assert r.code == 0, r
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "generation_config.json", "keep.txt",
                                                     "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                                     "model.safetensors.index.json"]
    # Written again with another layout: its own earlier shards are refused too (nothing is removed).
    r = trove("convert", model_dir / "pytorch_model.bin", out, "--max-shard-size", "1GB")
    assert r.code == 2 and "model-00001-of-00002.safetensors, model-00002-of-00002.safetensors" in r.errtext, r
    assert not (out / "model.safetensors").exists()
