"""Histograms (`trove stats --hist`) where their fast paths could go wrong: a tensor past the size
whose pages are kept between the two passes, many small tensors whose second passes wait for
their first on many threads, and ranges so wide or so narrow that the bin guesses are NaN or
every edge is one double. Each case runs under the suite's bounds (hostile.run_hostile) and the
counts are checked against numpy's with the same edges."""
import json

import numpy as np
import torch

from hostile import run_hostile

DBL_MAX = np.finfo(np.float64).max


def counts_of(t, edges):
    x = t.double().numpy().ravel()
    return np.histogram(x[np.isfinite(x)], bins=np.array(edges))[0].tolist()


def test_tensor_larger_than_the_kept_pages_in_bounded_memory(tmp_path):
    g = torch.Generator().manual_seed(5)
    big = torch.randn(20_000_000, generator=g)  # 80 MB: its pages are released as read
    big[::1_000_003] = float("nan")
    path = tmp_path / "big.pt"
    torch.save({"big": big, "small": big[:1000].clone()}, path)
    r = run_hostile("trove", "stats", path, "--json", "--hist", "32", "--threads", "2", watch=tmp_path, expect={0})
    got = {t["key"]: t for t in json.loads(r.out)["tensors"]}
    for key, t in (("big", big), ("small", big[:1000])):
        h = got[key]["histogram"]
        assert h["counts"] == counts_of(t, h["edges"]), key
        assert sum(got[key]["log10_abs_histogram"]["counts"]) == got[key]["finite"] - got[key]["zeros"], key


def test_many_small_tensors_second_passes_wait_for_their_first(tmp_path):
    g = torch.Generator().manual_seed(6)
    obj = {f"t{i}": torch.randn(int(n), generator=g) * 10.0 ** (i % 7 - 3)
           for i, n in enumerate(torch.randint(1, 3000, (400,), generator=g))}
    obj["empty"] = torch.zeros(0)
    obj["nan"] = torch.full((5,), float("nan"))
    path = tmp_path / "many.pt"
    torch.save(obj, path)
    r = run_hostile("trove", "stats", path, "--json", "--hist", "7", "--threads", "64", watch=tmp_path, expect={0})
    got = {t["key"]: t for t in json.loads(r.out)["tensors"]}
    assert got["nan"]["histogram"] is None and got["empty"]["histogram"] is None
    for key, t in obj.items():
        if key in ("nan", "empty"):
            continue
        assert got[key]["histogram"]["counts"] == counts_of(t, got[key]["histogram"]["edges"]), key


def test_ranges_past_float64_and_of_one_double_count_every_finite_value(tmp_path):
    obj = {"span": torch.tensor([-DBL_MAX, DBL_MAX, 1.0, float("nan"), float("inf"), 0.0], dtype=torch.float64),
           "one": torch.full((1001,), 1e16 + 2, dtype=torch.float64),
           "tiny": torch.tensor([5e-324, 1e-323, 5e-324] * 50, dtype=torch.float64)}
    path = tmp_path / "ranges.pt"
    torch.save(obj, path)
    for bins in ("1", "3", "32", "4096"):
        r = run_hostile("trove", "stats", path, "--json", "--hist", bins, watch=tmp_path, expect={0})
        got = {t["key"]: t for t in json.loads(r.out)["tensors"]}
        for key, t in got.items():
            assert sum(t["histogram"]["counts"]) == t["finite"], (key, bins)
            assert sum(t["log10_abs_histogram"]["counts"]) == t["finite"] - t["zeros"], (key, bins)
        # numpy agrees wherever its edges are usable (increasing, none NaN).
        h = got["tiny"]["histogram"]
        assert h["counts"] == counts_of(obj["tiny"], h["edges"]), bins
