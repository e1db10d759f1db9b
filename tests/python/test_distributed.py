"""trove.data.TorchDataset on torch.distributed itself: 4 processes started by
torch.multiprocessing.spawn (distributed_ranks.py) in a gloo process group on 127.0.0.1, each rank a
DataLoader with 2 workers over a dataset of 3 shards. The ranks' shares of an epoch are disjoint,
cover it but its last (batches mod 4), are each what `presk data batches --rank R --world-size 4`
prints (another process: what every run reads), and are the same when each rank reads the epoch a
second time; a tiny model trained with all_reduced gradients reaches the end of the epoch on every
rank (none waits for a step another never takes). The launch has a deadline and is killed whole past
it; the ranks meet through a file and every socket they have is on 127.0.0.1."""

import glob
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import BIN_DIR

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PYDIR = os.path.abspath(os.path.join(BUILD, "python"))
if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
    pytest.skip(f"the Python module was not built (no {PYDIR}/trove/_trove*.so)", allow_module_level=True)

import torch.distributed  # noqa: E402

if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("this torch has no gloo backend", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
PRESK = os.path.join(BIN_DIR, "presk")
COUNTS = (41, 25, 33)  # 99 samples: 33 batches of 3, 8 a rank, the last one to no rank
WORLD, BATCH, SEED, EPOCH = 4, 3, 20, 1
RUN_SECONDS = 120  # a hung rank fails the test at this deadline (each collective's is 40 s)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    first = 0
    for k, n in enumerate(COUNTS):
        txt = d / f"part{k}.txt"
        txt.write_text("".join(f"{i} {i / 2}\n" for i in range(first, first + n)))
        p = subprocess.run([PRESK, "data", "pack", "--type", "(idx[1000][], ℝ[1])", str(txt), "-o",
                            str(d / f"part-{k}.psk.d")], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        first += n
    return d


@pytest.fixture(scope="module")
def ranks(shards, tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks") / "result.json"
    env = dict(os.environ, TROVE_PYTHON_DIR=PYDIR, OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "distributed_ranks.py"), str(out),
                          str(shards / "part-*.psk.d")], env=env, start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        text, _ = p.communicate(timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the launcher, its ranks and their loader workers
        text, _ = p.communicate()
        pytest.fail(f"the ranks did not finish within {RUN_SECONDS} s:\n{text.decode(errors='replace')[-3000:]}")
    assert p.returncode == 0, text.decode(errors="replace")[-3000:]
    with open(out) as f:
        return json.load(f)


def cli(shards, *options):
    p = subprocess.run([PRESK, "data", "batches", str(shards / "part-*.psk.d"), "--batch", str(BATCH), "--shuffle",
                        str(SEED), "--epoch", str(EPOCH), *map(str, options)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [[int(x) for x in line.split()] for line in p.stdout.splitlines()]


def test_ranks_share_the_epoch_as_the_cli_says(shards, ranks):
    epoch = cli(shards)
    assert len(epoch) == sum(COUNTS) // BATCH == 33
    assert ranks["length"] == 33 // WORLD == 8
    shares = ranks["first"]
    assert len(shares) == WORLD and all(len(r) == 8 for r in shares)
    for r in range(WORLD):
        assert shares[r] == cli(shards, "--rank", r, "--world-size", WORLD)
        assert shares[r] == epoch[r:32:WORLD]
    seen = [i for r in shares for batch in r for i in batch]
    assert len(seen) == len(set(seen)) == 32 * BATCH  # disjoint
    assert sorted(seen) == sorted(i for batch in epoch[:32] for i in batch)  # the epoch but its last batch
    assert not set(epoch[32]) & set(seen)
    assert ranks["second"] == shares  # the second run: a new dataset, loader and workers on each rank


def test_training_with_all_reduced_gradients_reaches_the_end_on_every_rank(ranks):
    states = ranks["train"]
    assert [r[-1] for r in states] == [8.0] * WORLD  # every rank took every step
    assert all(r == states[0] for r in states)  # the all_reduced gradients kept the models equal
    import torch
    torch.manual_seed(0)
    initial = torch.nn.Linear(1, 1, dtype=torch.float64)
    assert states[0][:-1] != [p.item() for p in torch.cat([q.detach().reshape(-1) for q in initial.parameters()])]
