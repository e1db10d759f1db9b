"""`convert --rename` and `--dedupe-tied`: a Lightning-style training checkpoint made by torch
becomes the model file a model class loads, checked with the independent safetensors reader of
safetensors_spec.py and with torch itself (load_state_dict into the model, re-tied)."""
import json
import os
import sys

import pytest
import torch

import safetensors_spec


class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.norm = torch.nn.LayerNorm(6)
        self.lm_head = torch.nn.Linear(6, 11, bias=False)
        self.lm_head.weight = self.embed.weight  # tied, as language models tie them


@pytest.fixture
def checkpoint(tmp_path):
    torch.manual_seed(0)
    model = TiedLM()
    sd = {"model." + k: v for k, v in model.state_dict().items()}
    path = tmp_path / "last.ckpt"
    torch.save({"epoch": 3, "state_dict": sd, "optimizer_states": [{"steps": 7}]}, path)
    return path, model


def st_tensors(path):
    tensors, metadata = safetensors_spec.read(path.read_bytes())
    return tensors, metadata


def test_prefix_rename_and_dedupe_make_a_loadable_model_file(tmp_path, checkpoint, trove):
    path, model = checkpoint
    out = tmp_path / "model.safetensors"
    r = trove("convert", path, out, "--keys", "state_dict/**", "--rename", "state_dict/model.=",
              "--dedupe-tied", "--drop-values")
    assert r.code == 0, r
    assert "dropped 1 tied tensor" in r.errtext and "'lm_head.weight' (= 'embed.weight')" in r.errtext, r
    tensors, metadata = st_tensors(out)
    assert sorted(tensors) == ["embed.weight", "norm.bias", "norm.weight"]
    assert metadata == {"dropped_tied": "lm_head.weight=embed.weight"}
    # torch loads it into the model class; the dropped name is the tied one, which the model re-ties.
    fresh = TiedLM()
    state = {}
    for name, (dtype, shape, raw) in tensors.items():
        assert dtype == "F32"
        state[name] = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape)
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    assert missing == ["lm_head.weight"] and unexpected == []
    for name, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name


def test_glob_rename_moves_tensors_into_new_dicts(tmp_path, checkpoint, trove):
    path, model = checkpoint
    out = tmp_path / "moved.pt"
    r = trove("convert", path, out, "--rename", "state_dict/model.*=weights/*")
    assert r.code == 0, r
    loaded = torch.load(out, weights_only=True)
    assert list(loaded) == ["epoch", "optimizer_states", "weights"]  # the emptied state_dict is gone
    assert sorted(loaded["weights"]) == ["embed.weight", "lm_head.weight", "norm.bias", "norm.weight"]
    for name, value in model.state_dict().items():
        assert torch.equal(loaded["weights"][name], value), name
    # Without --dedupe-tied, .pt keeps the tie as a shared storage.
    assert loaded["weights"]["lm_head.weight"].data_ptr() == loaded["weights"]["embed.weight"].data_ptr()


@pytest.mark.parametrize("rule, message", [
    ("state_dict/*=x", "the same key path 'x'"),
    ("state_dict/model.norm.bias=state_dict/model.norm.weight", "which the file already holds"),
    ("state_dict/model.norm.bias=epoch/bias", "not a dict"),
    ("state_dict/model.norm.bias", "FROM=TO"),
    ("a*b*=c", "at most one '*'"),
])
def test_renames_that_would_lose_or_clash_are_refused_before_writing(tmp_path, checkpoint, trove, rule, message):
    path, _ = checkpoint
    out = tmp_path / "x.pt"
    r = trove("convert", path, out, "--rename", rule)
    assert r.code == 2, r
    assert message in r.errtext, r
    assert not out.exists()
    assert os.listdir(tmp_path) == ["last.ckpt"]


def test_tensors_inside_lists_cannot_be_renamed(tmp_path, trove):
    path = tmp_path / "l.pt"
    torch.save({"layers": [torch.ones(2), torch.zeros(2)]}, path)
    r = trove("convert", path, tmp_path / "o.pt", "--rename", "layers/0=first")
    assert r.code == 2 and "dicts with str keys" in r.errtext, r


def test_max_shard_size_alone_writes_safetensors_shards(tmp_path, checkpoint, trove):
    path, model = checkpoint
    out = tmp_path / "hub"
    r = trove("convert", path, out, "--keys", "state_dict/**", "--rename", "state_dict/model.=",
              "--drop-values", "--dedupe-tied", "--max-shard-size", "200B")
    assert r.code == 0, r
    index = json.loads((out / "model.safetensors.index.json").read_text())
    names = sorted(index["weight_map"])
    assert names == ["embed.weight", "norm.bias", "norm.weight"]
    for shard in set(index["weight_map"].values()):
        assert shard.endswith(".safetensors")
        st_tensors(out / shard)


def test_python_convert_takes_the_same_rules(tmp_path, checkpoint):
    build = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    sys.path.insert(0, os.path.join(build, "python"))
    import trove
    path, model = checkpoint
    out = tmp_path / "py.safetensors"
    notes = []
    trove.convert(path, out, keys="state_dict/**", exclude="**norm.bias", rename={"state_dict/model.": ""},
                  dedupe_tied=True, drop_values=True, note=notes.append)
    tensors, metadata = st_tensors(out)
    assert sorted(tensors) == ["embed.weight", "norm.weight"]
    assert metadata == {"dropped_tied": "lm_head.weight=embed.weight"}
    assert any("tied" in n for n in notes), notes
    with pytest.raises(trove.UsageError, match="at most one"):
        trove.convert(path, tmp_path / "bad.pt", rename={"a*b*": "c"})


def test_dedupe_keeps_the_first_of_one_tensor_object_saved_under_many_keys(tmp_path, trove):
    # torch.save memoizes a tensor object saved under several keys (`{"a": w, "b": w}`): one
    # value in several places. --dedupe-tied dropped every place, the first too (0 tensors left).
    w = torch.randn(3, 2)
    v = torch.randn(4)
    src = tmp_path / "shared.pt"
    torch.save({"a": w, "b": w, "x": v, "c": w, "nested": {"d": w, "y": v}}, src)
    out = tmp_path / "shared.safetensors"
    r = trove("convert", src, out, "--dedupe-tied")
    assert r.code == 0, r
    tensors, metadata = st_tensors(out)
    assert sorted(tensors) == ["a", "x"], sorted(tensors)
    assert tensors["a"] == ("F32", (3, 2), w.numpy().tobytes())
    assert tensors["x"] == ("F32", (4,), v.numpy().tobytes())
    assert sorted(metadata["dropped_tied"].split(",")) == ["b=a", "c=a", "nested/d=a", "nested/y=x"]
    assert "dropped 4 tied tensor(s)" in r.errtext, r


def test_exclude_leaves_out_one_place_of_a_tensor_saved_under_many_keys(tmp_path, trove):
    # Keeping one place of a memoized tensor kept every place: --exclude b wrote b.
    w = torch.randn(3)
    src = tmp_path / "shared.pt"
    torch.save({"a": w, "b": w, "c": w}, src)
    out = tmp_path / "out.safetensors"
    r = trove("convert", src, out, "--exclude", "b")
    assert r.code == 0, r
    tensors, _ = st_tensors(out)
    assert sorted(tensors) == ["a", "c"], sorted(tensors)
    out_pt = tmp_path / "out.pt"
    r = trove("convert", src, out_pt, "--keys", "c")
    assert r.code == 0, r
    got = torch.load(out_pt, weights_only=True)
    assert list(got) == ["c"] and torch.equal(got["c"], w), got
