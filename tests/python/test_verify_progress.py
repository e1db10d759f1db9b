"""verify is never a blank screen (issue 29): on a terminal it shows the progress line for every
check it makes, not only a zip's CRC-32s: reading the structure of files without checksums
(safetensors, GGUF, a legacy .pt's pickles, a tensordict directory) and a checkpoint directory's
archives (DCP, DeepSpeed, FSDP). TROVE_PROGRESS_DELAY=0 shows the line however short the work;
it is erased before the result line. In a pipe nothing extra appears."""
import numpy as np
import pytest
import torch

from test_diff_cli import on_terminal
from test_gguf import random_blocks, tensor_of, write_gguf
from test_progress_pager import NOW, PROGRESS


def tensors():
    g = torch.Generator().manual_seed(29)
    return {"w": torch.randn(256, 64, generator=g), "b": torch.arange(100, dtype=torch.int64)}


def make_safetensors(d, trove):
    torch.save(tensors(), d / "m.pt")
    assert trove("convert", d / "m.pt", d / "m.safetensors").code == 0
    return d / "m.safetensors"


def make_gguf(d, trove):
    rng = np.random.default_rng(29)
    blocks = ("q8", 8, [256, 8], random_blocks(rng, 8, 8 * 256 // 32, extreme=False))
    (d / "m.gguf").write_bytes(write_gguf([("general.architecture", 8, "x"), ("general.quantization_version", 4, 2)],
                                          [tensor_of("f", rng.standard_normal((64, 32)).astype("<f4")), blocks]))
    return d / "m.gguf"


def make_legacy_pt(d, trove):
    """torch.save's format before 1.6: pickles and raw storages, no zip (so no CRC-32 at all)."""
    torch.save(tensors(), d / "legacy.pt", _use_new_zipfile_serialization=False)
    return d / "legacy.pt"


def make_tensordict_dir(d, trove):
    torch.save(tensors(), d / "m.pt")
    assert trove("convert", d / "m.pt", d / "td", "--to", "tensordict").code == 0
    return d / "td"


def make_dcp(d, trove):
    from test_dcp import make
    make("plain", d / "dcp")
    return d / "dcp"


def make_deepspeed(d, trove):
    from test_deepspeed import model_groups, write_zero12
    write_zero12(d / "ds", model_groups(), 2)
    return d / "ds"


def make_fsdp(d, trove):
    from test_fsdp import make
    make("sharded", d / "fsdp")
    return d / "fsdp"


KINDS = {"safetensors": make_safetensors, "gguf": make_gguf, "legacy-pt": make_legacy_pt,
         "tensordict-dir": make_tensordict_dir, "dcp": make_dcp, "deepspeed": make_deepspeed, "fsdp": make_fsdp}


@pytest.mark.parametrize("kind", list(KINDS))
def test_verify_shows_progress_for_checks_other_than_crcs(trove, tmp_path, kind):
    path = KINDS[kind](tmp_path, trove)
    out = on_terminal(["verify", path, "--threads", "1"], 120, NOW)
    assert PROGRESS.search(out), out[-600:]
    assert "\r\x1b[K" in out, out[-600:]  # erased before the result
    last = out.replace("\r\x1b[K", "\n").strip().splitlines()[-1]
    assert last.startswith(str(path)) and ": ok (" in last, out[-600:]
    # In a pipe: the findings and the result line, nothing on stderr.
    r = trove("verify", path, "--threads", "1")
    assert r.code == 0 and r.err == b"" and b"\r" not in r.out and b"MB/s" not in r.out, r
    assert r.text.splitlines()[-1] == last, r
