"""safetensors/.pt -> GGUF with a Hugging Face config.json beside the input: the llama family's
metadata, typed as llama.cpp's converter writes it, read back by File.gguf_metadata() and by the
independent reader; missing keys are an error naming them."""
import json

import pytest
import torch

from test_gguf_peer import compare_with_peer

import trove as trovelib

LLAMA = {"model_type": "llama", "max_position_embeddings": 4096, "hidden_size": 64, "num_hidden_layers": 2,
         "intermediate_size": 172, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 320,
         "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "torch_dtype": "bfloat16"}


def model_dir(tmp_path, config):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    torch.save({"tok_embeddings.weight": torch.ones(4, 64)}, d / "m.pt")
    return d


def test_config_json_gives_llama_metadata(tmp_path, trove):
    d = model_dir(tmp_path, LLAMA)
    assert trove("convert", d / "m.pt", d / "m.safetensors").code == 0
    for src in (d / "m.pt", d / "m.safetensors"):
        out = tmp_path / (src.suffix[1:] + ".gguf")
        r = trove("convert", src, out)
        assert r.code == 0, r
        with trovelib.open(out) as f:
            meta = f.gguf_metadata()
            props = f.info()["properties"]
        assert meta["general.architecture"] == ("string", "llama")
        assert meta["llama.context_length"] == ("u32", 4096) and meta["llama.embedding_length"] == ("u32", 64)
        assert meta["llama.block_count"] == ("u32", 2) and meta["llama.feed_forward_length"] == ("u32", 172)
        assert meta["llama.attention.head_count"] == ("u32", 8) and meta["llama.attention.head_count_kv"] == ("u32", 2)
        assert meta["llama.vocab_size"] == ("u32", 320) and meta["llama.rope.dimension_count"] == ("u32", 8)
        assert meta["llama.attention.layer_norm_rms_epsilon"] == ("f32", float(torch.tensor(1e-05, dtype=torch.float32)))
        assert meta["llama.rope.freq_base"] == ("f32", 500000.0)
        assert props["context length"] == "4,096" and props["kv heads"] == "2"
        compare_with_peer(out)
    # --metadata wins over config.json for its keys; naming the architecture leaves config.json unread.
    out = tmp_path / "named.gguf"
    assert trove("convert", d / "m.pt", out, "--metadata", "general.name=mine", "--metadata", "llama.vocab_size=7").code == 0
    with trovelib.open(out) as f:
        meta = f.gguf_metadata()
    assert meta["general.name"] == ("string", "mine") and meta["llama.vocab_size"] == ("string", "7")
    out = tmp_path / "other.gguf"
    assert trove("convert", d / "m.pt", out, "--metadata", "general.architecture=tiny").code == 0
    with trovelib.open(out) as f:
        assert list(f.gguf_metadata()) == ["general.architecture"]


def test_config_json_missing_keys_are_named(tmp_path, trove):
    config = {k: v for k, v in LLAMA.items() if k not in ("vocab_size", "rms_norm_eps")}
    d = model_dir(tmp_path, config)
    r = trove("convert", d / "m.pt", tmp_path / "m.gguf")
    assert r.code != 0 and "vocab_size, rms_norm_eps" in r.errtext and "config.json" in r.errtext, r
    assert not (tmp_path / "m.gguf").exists()
    (d / "config.json").write_text(json.dumps(dict(LLAMA, model_type="whisper")))
    r = trove("convert", d / "m.pt", tmp_path / "m.gguf")
    assert r.code != 0 and "model_type 'whisper'" in r.errtext and "--metadata general.architecture" in r.errtext, r
    (d / "config.json").write_text("[1, 2")
    r = trove("convert", d / "m.pt", tmp_path / "m.gguf")
    assert r.code != 0 and "not valid JSON" in r.errtext, r
    (d / "config.json").write_text('{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    r = trove("convert", d / "m.pt", tmp_path / "m.gguf")
    assert r.code != 0 and "config.json" in r.errtext and "nested deeper than 32" in r.errtext, r
    assert not (tmp_path / "m.gguf").exists()
