"""`trove cat` for people: rows wrapped at the terminal's width (80 in a pipe) as numpy wraps
them, --precision for the float values shown, --json exact whatever --precision says."""
import json
import re

import pytest
import torch

from test_diff_cli import on_terminal


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    g = torch.Generator().manual_seed(3)
    obj = {"v": torch.randn(512, generator=g), "m": torch.randn(3, 40, generator=g, dtype=torch.float64), "lr": 0.0012345678}
    path = str(tmp_path_factory.mktemp("cat") / "v.pt")
    torch.save(obj, path)
    return path, obj


def values(text):
    body = text.split("\n", 1)[1]
    return [float(x) for x in re.findall(r"-?[0-9][0-9.e+-]*", body.replace("...", ""))]


def f32(xs):
    return torch.tensor(xs, dtype=torch.float32).tolist()


def test_pipe_wraps_at_80_columns(trove, vectors):
    path, obj = vectors
    r = trove("cat", path, "v")
    assert r.code == 0, r
    lines = r.text.splitlines()[1:]
    assert len(lines) > 20 and all(len(l) <= 80 for l in lines), max(len(l) for l in lines)
    assert max(len(l) for l in lines) > 70  # filled, not one element a line
    assert all(l.startswith(" ") for l in lines[1:])  # continuation lines under the first element
    assert f32(values(r.text)) == obj["v"].tolist()
    r = trove("cat", path, "m")
    lines = r.text.splitlines()[1:]
    assert all(len(l) <= 80 for l in lines) and lines[1].startswith("  ")
    assert values(r.text) == obj["m"].reshape(-1).tolist()


@pytest.mark.parametrize("columns", [80, 120])
def test_terminal_width(vectors, columns):
    path, obj = vectors
    out = on_terminal(["cat", path, "v"], columns)
    lines = out.splitlines()[1:]
    assert all(len(l) <= columns for l in lines) and max(len(l) for l in lines) > columns - 20, lines
    assert f32(values(out)) == obj["v"].tolist()


def test_precision(trove, vectors):
    path, obj = vectors
    r = trove("cat", path, "m", "lr", "--precision", "3")
    assert r.code == 0, r
    m, lr = r.text.split("lr = ")
    assert values(m) == [float("%.3g" % x) for x in obj["m"].reshape(-1).tolist()]
    assert lr.strip() == "%.3g" % obj["lr"]
    r = trove("cat", path, "m", "--precision", "3", "--json")
    assert json.loads(r.out)["data"] == obj["m"].tolist()
    for bad in ("0", "18"):
        assert trove("cat", path, "m", "--precision", bad).code == 2


def test_info_and_cat_values_precision(trove, tmp_path):
    path = str(tmp_path / "hp.pt")
    torch.save({"w": torch.ones(2), "lr": 0.0012345678, "betas": (0.9, 0.99912345), "sched": {"gamma": 0.123456789}}, path)
    plain = trove("info", path).text
    assert "lr: 0.0012345678" in plain and "gamma: 0.123456789" in plain
    r = trove("info", path, "--precision", "3")
    assert r.code == 0, r
    assert "lr: 0.00123" in r.text and "betas: (0.9, 0.999)" in r.text and "gamma: 0.123\n" in r.text
    r = trove("cat", path, "sched", "--precision", "2")
    assert "gamma: 0.12\n" in r.text
    assert trove("info", path, "--precision", "0").code == 2
