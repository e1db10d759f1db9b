"""trove.load on a corpus of real third-party checkpoints (issue #26): every .pt .pth .bin .ckpt
under `pt/` of the corpus comes back as torch 1.13's loaders read it, compared with the reference
loader (stub_unpickler.py: torch's records and tensor rebuilders, every class the file names an
inert stub, so nothing of the file ever runs, whichever file it is): the same types, values bit
for bit and sharing. The files trove refuses are listed below with the reason, and must be
refused with a trove.Error saying so; `hostile/` and `malformed/` files must be refused too (they
are never given to any loader that runs a pickle).

The corpus is not part of the repository: TROVE_CORPUS names its directory (the one holding
MANIFEST.tsv, pt/, hostile/...); without it these tests are skipped.
"""
import glob
import os
import sys
import warnings

import pytest

CORPUS = os.environ.get("TROVE_CORPUS")
NO_CORPUS = "TROVE_CORPUS is not set (the directory of the real-file corpus: MANIFEST.tsv, pt/, hostile/)"

BUILD_DIR = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PYDIR = os.path.join(BUILD_DIR, "python")
if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
    pytest.skip(f"the Python module was not built (no {PYDIR}/trove/_trove*.so)", allow_module_level=True)
sys.path.insert(0, PYDIR)

import trove  # noqa: E402
from stub_unpickler import assert_same, reference_load  # noqa: E402

EXTENSIONS = (".pt", ".pth", ".bin", ".ckpt")

# Files trove refuses, by their path under pt/, and what its error says.
REFUSED = {
    # TorchScript archives: torch.load hands them to torch.jit.load, which runs their code; trove
    # reads data only
    "huggingface__lerobot/src__lerobot__robots__unitree_g1__assets__g1__locomotion__GR00T-WholeBodyControl-Walk_pytorch.pt":
        (trove.RefusedError, "a TorchScript archive .*: refused"),
    "huggingface__lerobot/src__lerobot__robots__unitree_g1__assets__g1__locomotion__policy_2950.pt":
        (trove.RefusedError, "a TorchScript archive .*: refused"),
    "pytorch__serve/cpp__test__resources__torchscript_model__babyllama__babyllama_handler__dummy.pt":
        (trove.RefusedError, "a TorchScript archive .*: refused"),
}


def corpus_files(folder):
    if not CORPUS:
        return []
    root = os.path.join(CORPUS, folder)
    return sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "**", "*"), recursive=True)
                  if p.endswith(EXTENSIONS) and os.path.isfile(p))


PT_FILES = corpus_files("pt")


@pytest.fixture(autouse=True)
def corpus():
    if not CORPUS:
        pytest.skip(NO_CORPUS)


def test_the_corpus_is_there():
    assert len(PT_FILES) >= 50, f"{CORPUS}/pt holds {len(PT_FILES)} checkpoints"
    assert set(REFUSED) <= set(PT_FILES)


@pytest.mark.parametrize("name", PT_FILES)
def test_a_real_checkpoint_loads_as_torch_reads_it(name):
    path = os.path.join(CORPUS, "pt", name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", trove.UnknownObjectsWarning)
        if name in REFUSED:
            error, says = REFUSED[name]
            with pytest.raises(error, match=says):
                trove.load(path)
            return
        got = trove.load(path)
    assert_same(trove, got, reference_load(path))


@pytest.mark.parametrize("folder", ["hostile", "malformed"])
def test_hostile_and_malformed_files_are_refused(folder):
    names = corpus_files(folder)
    assert names, f"no checkpoints under {CORPUS}/{folder}"
    for name in names:
        with pytest.raises(trove.Error):
            trove.load(os.path.join(CORPUS, folder, name))
