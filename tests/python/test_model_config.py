"""`info` on a Hugging Face model shows the key facts of the config.json beside it first, and
ignores a config.json that is not one (garbage, too large) without failing."""
import json
import struct

import safetensors_spec

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 128, "torch_dtype": "bfloat16", "rope_theta": 10000.0}


def write_model(directory):
    raw = struct.pack("<2f", 1.0, 2.0)
    (directory / "model.safetensors").write_bytes(safetensors_spec.write({"model.embed.weight": ("F32", [2], raw)}))


def test_info_shows_config_facts_first(tmp_path, trove):
    write_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    r = trove("info", tmp_path / "model.safetensors")
    assert r.code == 0, r
    lines = r.text.splitlines()
    assert lines[1] == "config.json", r.text
    facts = {line[:21].strip(): line[21:] for line in lines[2:10]}
    assert facts == {"architecture": "LlamaForCausalLM", "model type": "llama", "hidden size": "64",
                     "layers": "2", "heads": "4", "kv heads": "2", "vocab": "128", "dtype": "bfloat16"}, r.text
    assert lines.index("config.json") < min(i for i, l in enumerate(lines) if l.strip().startswith("tensors"))


def test_config_text_is_escaped(tmp_path, trove):
    write_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "x\x1b[31mred"}))
    r = trove("info", tmp_path / "model.safetensors")
    assert r.code == 0, r
    assert b"\x1b" not in r.out and "model type" in r.text, r.text


def test_a_config_that_is_not_one_is_ignored(tmp_path, trove):
    write_model(tmp_path)
    (tmp_path / "config.json").write_bytes(b"{not json")
    r = trove("info", tmp_path / "model.safetensors")
    assert r.code == 0 and "config.json" not in r.text, r
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "big", "pad": "x" * (2 << 20)}))
    r = trove("info", tmp_path / "model.safetensors")
    assert r.code == 0 and "config.json" not in r.text, r


def test_no_config_no_section(tmp_path, trove):
    write_model(tmp_path)
    r = trove("info", tmp_path / "model.safetensors")
    assert r.code == 0 and "config.json" not in r.text, r


def test_info_json_has_the_config_facts(tmp_path, trove):
    write_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    r = trove("info", tmp_path / "model.safetensors", "--json")
    assert r.code == 0, r
    facts = json.loads(r.out)["config"]
    # The file's own keys and values (numbers stay numbers, architectures a list); what info
    # does not show (rope_theta) is left out.
    assert facts == {k: v for k, v in CONFIG.items() if k != "rope_theta"}, facts
    # A multimodal config's language-model numbers come from text_config; exact text, not escaped.
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "x\x1b", "text_config": {"hidden_size": 8}}))
    facts = json.loads(trove("info", tmp_path / "model.safetensors", "--json").out)["config"]
    assert facts == {"model_type": "x\x1b", "hidden_size": 8}, facts


def test_info_json_config_is_null_without_one(tmp_path, trove):
    write_model(tmp_path)
    assert json.loads(trove("info", tmp_path / "model.safetensors", "--json").out)["config"] is None
    (tmp_path / "config.json").write_bytes(b"[1, 2]")
    assert json.loads(trove("info", tmp_path / "model.safetensors", "--json").out)["config"] is None
