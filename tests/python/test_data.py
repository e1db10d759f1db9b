"""trove.data (docs/python.md, "Data") against the presk CLI and torch's DataLoader: samples equal
`presk data export`, batches equal `presk data batches` for every seed, epoch, take, rank and
worker split, TorchDataset inside real DataLoaders (workers, persistent workers, set_epoch).
The shards are made here with `presk data pack`."""

import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import BIN_DIR

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PYDIR = os.path.join(BUILD, "python")
if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
    pytest.skip(f"the Python module was not built (no {PYDIR}/trove/_trove*.so)", allow_module_level=True)
sys.path.insert(0, PYDIR)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import trove  # noqa: E402
import trove.data  # noqa: E402

PRESK = os.path.join(BIN_DIR, "presk")
TYPE = "(idx[5000][], (ℝ[2], idx[7][3]))"
COUNTS = (23, 0, 31, 17)  # 71 samples, one shard empty


def presk(*args, cwd=None):
    p = subprocess.run([PRESK, "data", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120)
    return p


def pack(path, type_text, lines, encoding=None):
    txt = str(path) + ".txt"
    with open(txt, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    extra = ["--encoding", encoding] if encoding else []
    p = presk("pack", "--type", type_text, txt, "-o", path, *extra)
    assert p.returncode == 0, p.stderr


def sample_line(i):
    # leaf 0 is the sample's index in the dataset: every batch says which samples it holds
    return f"{i} {i / 4} {-i / 8} {i % 7} {(i + 1) % 7} {(i * 3) % 7}"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    paths, first = [], 0
    for k, n in enumerate(COUNTS):
        path = d / f"train-{k:05d}.psk.d"
        pack(path, TYPE, [sample_line(first + i) for i in range(n)])
        paths.append(str(path))
        first += n
    with open(d / "train.json", "w") as f:
        json.dump({"shards": [os.path.basename(p) for p in paths]}, f)
    return d, paths


def cli_batches(sources, batch, *options):
    p = presk("batches", *sources, "--batch", batch, *options)
    assert p.returncode == 0, p.stderr
    return [[int(x) for x in line.split()] for line in p.stdout.splitlines()]


@pytest.fixture(scope="module")
def reference(shards, tmp_path_factory):
    """Every sample, as `presk data export` writes it, in dataset order."""
    tmp = tmp_path_factory.mktemp("export")
    out = []
    for k, path in enumerate(shards[1]):
        dest = os.path.join(tmp, f"export{k}.json")
        p = presk("export", path, "-o", dest)
        assert p.returncode == 0, p.stderr
        with open(dest) as f:
            out += json.load(f)
    return out


def test_open_length_type_and_samples_equal_the_export(shards, reference):
    d, paths = shards
    for sources in (str(d / "train-*.psk.d"), paths, str(d / "train.json")):
        ds = trove.data.open(sources)
        assert len(ds) == sum(COUNTS) == len(reference)
        assert ds.type == TYPE
        assert ds.paths == paths
        assert [s[1:] for s in ds.shards] == [(23, 0), (0, 23), (31, 23), (17, 54)]
        assert [leaf["dtype"] for leaf in ds.leaves] == ["uint16", "float64", "uint8"]
    ds = trove.data.open(paths)
    for i in (0, 22, 23, 53, 54, 70, -1):
        idx, (real, small) = ds[i]
        want = reference[i]
        assert idx.dtype == np.uint16 and idx.shape == ()
        assert int(idx) == want[0] == (i % len(ds))
        assert real.tolist() == want[1][0] and small.tolist() == want[1][1]
    with pytest.raises(IndexError):
        ds[71]
    pt = trove.data.open(paths, framework="pt")
    idx, (real, small) = pt[54]
    assert idx.dtype == torch.int64 and small.dtype == torch.int64 and real.dtype == torch.float64
    assert idx.item() == 54 and small.tolist() == reference[54][1][1]


@pytest.mark.parametrize("options", [
    dict(), dict(seed=7), dict(seed=7, epoch=3), dict(seed=2**40 + 1, epoch=2**33, take=5),
    dict(seed=1, rank=2, world_size=3), dict(seed=1, epoch=1, take=7, rank=1, world_size=2),
    dict(seed=3, rank=1, world_size=2, worker=1, workers=3), dict(rank=0, world_size=4, worker=0, workers=2),
])
def test_batches_equal_the_cli(shards, reference, options):
    d, paths = shards
    flags = []
    for key, flag in (("seed", "--shuffle"), ("epoch", "--epoch"), ("take", "--take")):
        if key in options:
            flags += [flag, options[key]]
    if "rank" in options:
        flags += ["--rank", options["rank"], "--world-size", options["world_size"]]
    if "worker" in options:
        flags += ["--worker", options["worker"], "--workers", options["workers"]]
    want = cli_batches([str(d / "train-*.psk.d")], 4, *flags)
    assert want, "the partition should hold batches"
    assert trove.data.batch_indices(paths, 4, **options).tolist() == want
    got = list(trove.data.batches(str(d / "train.json"), 4, with_indices=True, **options))
    assert [idx.tolist() for idx, _ in got] == want
    for rows, (_, (idx, (real, small))) in zip(want, got):
        assert idx.shape == (4,) and real.shape == (4, 2) and small.shape == (4, 3)
        assert idx.tolist() == rows
        assert real.tolist() == [reference[i][1][0] for i in rows]
        assert small.tolist() == [reference[i][1][1] for i in rows]


def mapped_file(array):
    """The file whose mapping holds the array's first byte (/proc/self/maps), or None."""
    address = array.__array_interface__["data"][0]
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return fields[5] if len(fields) > 5 and fields[5].startswith("/") else None
    return None


def test_file_order_batches_are_views_written_privately(tmp_path):
    # Batches of 8 samples of 8 KiB: large enough to be mapped rather than copied (64 KiB).
    path = tmp_path / "aligned.psk.d"
    pack(path, "ℝ[row: 1024]", [" ".join(str(i + j / 1024) for j in range(1024)) for i in range(40)])
    before = path.read_bytes()
    assert (len(before) - 40 * 8192) % 8 == 0  # a 32-byte header: the float64 samples are aligned
    ds = trove.data.open(path)
    a, b = ds.batches(8, take=2)
    assert mapped_file(a) == mapped_file(b) == str(path) and a.flags.writeable
    assert a.shape == (8, 1024) and a[3, 512] == 3.5 and b[0, 0] == 8.0
    # Each batch is its own copy-on-write mapping: a write into one changes neither the file, nor
    # another batch, nor the same samples read again (the next epoch).
    a[0, 0] = 1e9
    b[0, 0] = 2e9
    assert path.read_bytes() == before
    assert ds[0][0] == 0.0 and next(ds.batches(8))[0, 0] == 0.0 and next(ds.batches(16))[8, 0] == 8.0
    t = next(iter(trove.data.open(path, framework="pt").batches(8)))
    t.mul_(0)
    assert t.dtype == torch.float64 and next(ds.batches(8))[3, 512] == 3.5
    # Shuffled batches are gathered: equal to the samples, in memory of their own.
    for idx, x in ds.batches(8, seed=4, with_indices=True):
        assert mapped_file(x) is None
        assert x[:, 0].tolist() == idx.tolist() and x[:, 1].tolist() == [i + 1 / 1024 for i in idx.tolist()]


def test_bfloat16_and_narrow_leaves(tmp_path):
    path = tmp_path / "bf.psk.d"
    pack(path, "(ℝ[3], ℝ[])", [f"{i} {i + 0.5} -{i} {i / 4}" for i in range(6)], encoding="bf16,f32")
    with pytest.raises(trove.UnsupportedError, match="bfloat16"):
        trove.data.open(path)
    raw = next(trove.data.batches(path, 2, raw=True))
    assert raw[0].dtype == np.uint16 and raw[1].dtype == np.float32
    assert (raw[0].astype(np.uint32) << 16).view(np.float32).tolist() == [[0, 0.5, 0], [1, 1.5, -1]]
    bf, f32 = next(trove.data.batches(path, 2, framework="pt"))
    assert bf.dtype == torch.bfloat16 and f32.dtype == torch.float32
    assert bf.float().tolist() == [[0, 0.5, 0], [1, 1.5, -1]] and f32.tolist() == [0, 0.25]


def test_errors_carry_the_spec_codes(shards, tmp_path):
    d, paths = shards
    other = tmp_path / "other.psk.d"
    pack(other, "idx[9][]", ["1", "2"])
    with pytest.raises(trove.CorruptError) as e:
        trove.data.open([paths[0], str(other)])
    assert e.value.spec_code == 9005 and paths[0] in str(e.value) and str(other) in str(e.value)
    with pytest.raises(trove.NotFoundError) as e:
        trove.data.open(str(tmp_path / "none-*.psk.d"))
    assert e.value.spec_code == 9002
    with pytest.raises(trove.UsageError):
        trove.data.batch_indices(paths, 4, rank=2, world_size=2)
    with pytest.raises(trove.UsageError):
        trove.data.batch_indices(paths, 0)
    # An index at its bound: E9004 whether the batch is a view or gathered.
    bad = tmp_path / "bad.psk.d"
    pack(bad, "idx[200][2]", ["1 2", "3 4", "5 6", "7 8"])
    raw = bytearray(bad.read_bytes())
    raw[-1] = 250
    bad.write_bytes(bytes(raw))
    big = tmp_path / "big.psk.d"  # samples of 16 KiB: batches of 4 or more are viewed in file order
    pack(big, "idx[200][16384]", [" ".join([str(i)] * 16384) for i in range(5)])
    raw = bytearray(big.read_bytes())
    raw[-1] = 201
    big.write_bytes(bytes(raw))
    for path, batch in ((bad, 4), (big, 5)):
        for seed in (None, 1):
            for framework in ("np", "pt"):
                with pytest.raises(trove.CorruptError) as e:
                    list(trove.data.batches(path, batch, seed=seed, framework=framework))
                assert e.value.spec_code == 9004, (path, seed, framework)
                assert str(path) in str(e.value)
    assert list(trove.data.batches(bad, 2, take=1))[0].tolist() == [[1, 2], [3, 4]]
    assert mapped_file(next(trove.data.batches(big, 4))) == str(big)


def rank_batches(d, batch, rank, world, epoch, seed=11):
    return cli_batches([str(d / "train.json")], batch, "--shuffle", seed, "--epoch", epoch,
                       "--rank", rank, "--world-size", world)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_torch_dataloader_yields_the_ranks_batches_in_order(shards, workers):
    d, _ = shards
    ds = trove.data.TorchDataset(str(d / "train-*.psk.d"), 3, seed=11, rank=1, world_size=2, with_indices=True)
    assert isinstance(ds, torch.utils.data.IterableDataset)
    want = rank_batches(d, 3, 1, 2, 0)
    assert len(ds) == len(want) == 11
    loader = ds.loader(num_workers=workers)
    assert len(loader) == len(want)
    got = list(loader)
    assert [idx.tolist() for idx, _ in got] == want
    for idx, (first, (real, small)) in got:
        assert first.dtype == torch.int64 and first.tolist() == idx.tolist()
        assert real.shape == (3, 2) and real[:, 0].tolist() == [i / 4 for i in idx.tolist()]
        assert small.dtype == torch.int64 and small[:, 0].tolist() == [i % 7 for i in idx.tolist()]


def test_set_epoch_reaches_persistent_workers(shards):
    d, _ = shards
    ds = trove.data.TorchDataset(str(d / "train.json"), 4, seed=5, rank=0, world_size=3, with_indices=True)
    loader = ds.loader(num_workers=2, persistent_workers=True)
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        assert [idx.tolist() for idx, _ in loader] == rank_batches(d, 4, 0, 3, epoch, seed=5)
    assert rank_batches(d, 4, 0, 3, 1, seed=5) != rank_batches(d, 4, 0, 3, 2, seed=5)


def test_spawned_persistent_workers_get_the_dataset_and_its_epoch(shards):
    d, _ = shards
    ds = trove.data.TorchDataset(str(d / "train.json"), 4, seed=5, rank=2, world_size=3, with_indices=True)
    loader = ds.loader(num_workers=2, multiprocessing_context="spawn", persistent_workers=True)
    for epoch in (4, 1):
        ds.set_epoch(epoch)
        assert [idx.tolist() for idx, _ in loader] == rank_batches(d, 4, 2, 3, epoch, seed=5)


def test_torch_dataset_rank_and_world_size(shards, monkeypatch):
    d, _ = shards
    source = str(d / "train.json")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(trove.UsageError, match="process group"):
        trove.data.TorchDataset(source, 4)
    ds = trove.data.TorchDataset(source, 4, rank=3, world_size=4)
    assert (ds.rank, ds.world_size, len(ds)) == (3, 4, 4)
    monkeypatch.delenv("WORLD_SIZE")
    ds = trove.data.TorchDataset(source, 4, take=9)
    assert (ds.rank, ds.world_size, len(ds)) == (0, 1, 9)
    with pytest.raises(trove.UsageError):
        trove.data.TorchDataset(source, 4, rank=4, world_size=4)
    with pytest.raises(trove.UsageError, match="batch_size"):
        ds.loader(batch_size=4)
    # Pickling (spawned workers) keeps the epoch.
    import pickle
    ds.set_epoch(6)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.epoch == 6 and [b[0].tolist() for b in copy] == [b[0].tolist() for b in ds]
