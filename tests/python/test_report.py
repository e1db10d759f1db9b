"""`trove report`: one self-contained HTML page about a checkpoint (or two), opened in headless
Chromium to check what it draws: every key in the table, the treemap, the change chart, the value
tree, no console error, no network. Checkpoints are made by torch; figures are checked against
numpy (the page shows what the C++ side computed)."""
import json
import math
import os
import re
import urllib.parse

import numpy as np
import pytest
import torch

from report_page import embedded_data, render, screenshot

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def transformer(seed=0, layers=4, width=32):
    g = torch.Generator().manual_seed(seed)
    sd = {"embed.weight": torch.randn(100, width, generator=g)}
    for i in range(layers):
        p = f"layers.{i}."
        for name in ("attn.q", "attn.k", "attn.v", "attn.o"):
            sd[p + name + ".weight"] = torch.randn(width, width, generator=g) / width ** 0.5
            sd[p + name + ".bias"] = torch.zeros(width)
        sd[p + "mlp.fc1.weight"] = torch.randn(4 * width, width, generator=g) / width ** 0.5
        sd[p + "mlp.fc2.weight"] = torch.randn(width, 4 * width, generator=g) / (4 * width) ** 0.5
        sd[p + "norm.weight"] = torch.ones(width)
    sd["norm.weight"] = torch.ones(width)
    sd["lm_head.weight"] = sd["embed.weight"]  # tied
    return sd


def checkpoint(sd, epoch=3):
    return {"model": sd, "epoch": epoch, "step": 12000,
            "config": {"width": 32, "layers": 4, "activation": "gelu", "dropout": 0.1, "tie_embeddings": True},
            "hyperparameters": {"lr": 3e-4, "betas": (0.9, 0.999), "schedule": ["warmup", 500, "cosine"]}}


def report(trove, *args):
    r = trove("report", *args)
    assert r.code == 0, r
    return r


def no_network(rest):
    """Outside the embedded data, the page names no URL it could fetch."""
    assert not re.search(r"https?://", rest), re.findall(r".{40}https?://.{40}", rest)[:3]
    assert not re.search(r"<(link|img|iframe|object|embed)\b", rest, re.I)
    assert not re.search(r"<script[^>]*\bsrc=", rest, re.I)
    assert "default-src 'none'" in rest  # and the page forbids any fetch anyway


def test_one_checkpoint(trove, tmp_path):
    sd = transformer()
    sd["layers.1.attn.q.weight"][0, 0] = float("nan")
    path = tmp_path / "model.pt"
    torch.save(checkpoint(sd), path)
    out = tmp_path / "model.html"
    report(trove, path, "-o", out)

    data, rest = embedded_data(out)
    no_network(rest)
    tensors = {t["key"]: t for t in data["a"]["tensors"]}
    assert set(tensors) == {"model/" + k for k in sd}
    for k, t in sd.items():
        got = tensors["model/" + k]
        x = t.numpy().astype(np.float64).ravel()
        f = x[np.isfinite(x)]
        assert got["min"] == f.min() and got["max"] == f.max(), k
        assert math.isclose(got["mean"], f.mean(), rel_tol=1e-9, abs_tol=1e-12), k
        assert got["nan"] == int(np.isnan(x).sum())
        assert got["nbytes"] == t.numel() * 4
        lo, hi = got["histogram"]["range"]
        counts, _ = np.histogram(f, bins=32, range=(lo, hi))
        assert got["histogram"]["counts"] == counts.tolist(), k
    assert tensors["model/lm_head.weight"]["tied"] is True
    assert data["a"]["summary"]["non_finite"] == ["model/layers.1.attn.q.weight"]
    assert data["a"]["values"]["epoch"] == 3
    assert data["a"]["values"]["config"]["activation"] == "gelu"

    page = render(out)
    assert sorted(page.keys) == sorted(tensors), "every key in the table, once"
    assert page.rects.get("treemap-section", 0) >= len(sd) - 1  # a box per distinct tensor at least
    assert page.histograms > 0
    text = "".join(page.text)
    for shown in ("epoch", "gelu", "hyperparameters", "warmup", "0.0003"):
        assert shown in text, shown
    screenshot(out, tmp_path / "model.png")

    # The table's filter (a glob here) and sort, as a link sets them: the rows shown are exactly
    # the matching keys, in descending order of std.
    page = render(out, fragment="#filter=model/layers.1*&sort=std-desc")
    want = sorted((k for k in tensors if k.startswith("model/layers.1.")), key=lambda k: (-tensors[k]["std"], k))
    assert page.keys == want or [tensors[k]["std"] for k in page.keys] == [tensors[k]["std"] for k in want], page.keys
    page = render(out, fragment="#filter=ATTN.Q.BIAS")  # a substring, any case
    assert sorted(page.keys) == sorted(k for k in tensors if "attn.q.bias" in k)


def test_two_checkpoints_show_what_changed(trove, tmp_path):
    base = transformer(seed=1)
    tuned = {k: v.clone() for k, v in base.items()}
    g = torch.Generator().manual_seed(7)
    scale = {"layers.3.mlp.fc1.weight": 0.5, "layers.3.attn.q.weight": 0.1, "layers.2.mlp.fc2.weight": 0.01}
    for k, s in scale.items():
        tuned[k] = base[k] + s * torch.randn(base[k].shape, generator=g) * base[k].std()
    del tuned["layers.0.norm.weight"]
    tuned["adapter.weight"] = torch.randn(8, 8, generator=g)
    # A zero-initialised LoRA B that training moved: ranked after every real change (its relative
    # change is infinite), however large its values.
    base["lora_B"] = torch.zeros(8, 4)
    tuned["lora_B"] = 10 * torch.randn(8, 4, generator=g)
    tuned["lm_head.weight"] = tuned["embed.weight"]
    a, b = tmp_path / "base.pt", tmp_path / "tuned.pt"
    torch.save(checkpoint(base), a)
    torch.save(checkpoint(tuned, epoch=5), b)
    out = tmp_path / "change.html"
    report(trove, a, b, "-o", out)

    data, rest = embedded_data(out)
    no_network(rest)
    d = data["diff"]
    assert d["only_in_a"] == ["model/layers.0.norm.weight"]
    assert d["only_in_b"] == ["model/adapter.weight"]
    changed = {t["key"][len("model/"):]: t["relative"] for t in d["tensors"] if t["relative"] != 0}
    assert changed.pop("lora_B") == {"$float": "inf"}  # JSON has no infinity
    assert set(changed) == set(scale)
    for k, rel in changed.items():
        x, y = base[k].numpy().astype(np.float64), tuned[k].numpy().astype(np.float64)
        assert math.isclose(rel, np.linalg.norm(x - y) / np.linalg.norm(x), rel_tol=1e-9), k
    assert {"key": "epoch", "a": "3", "b": "5"} in d["values"]

    page = render(out)
    assert page.bars == len(scale) + 1
    assert sorted(page.keys) == sorted(t["key"] for t in data["a"]["tensors"])
    text = "".join(page.text)
    assert "model/layers.0.norm.weight" in text and "model/adapter.weight" in text
    # The bars are sorted, largest change first: their labels appear in that order.
    order = sorted(scale, key=lambda k: -changed[k]) + ["lora_B"]
    positions = [text.index("model/" + k, text.index("What changed")) for k in order]
    assert positions == sorted(positions), order
    # The bars on a log scale of the relative change (1e-7 to 1): a change 50x smaller than the
    # largest still has most of its bar's length (log10(r) + 7 over 7), not a fiftieth of it.
    widths = dict(zip(order, page.bar_widths))
    big, small = order[0], order[len(scale) - 1]
    expected = (math.log10(changed[small]) + 7) / (math.log10(changed[big]) + 7)
    assert math.isclose(widths[small] / widths[big], expected, rel_tol=0.02), (widths, changed)
    screenshot(out, tmp_path / "change.png")


def _cut_by_an_edge(values, inner_edges, log=False):
    """Which values lie in a float32 bucket (sign, exponent, top 7 mantissa bits) that an inner
    edge cuts: the values whose histogram share the report may spread to a neighbouring bin."""
    bits = values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    a = bits.view(np.float32).astype(np.float64)
    b = (bits | np.uint32(0xFFFF)).view(np.float32).astype(np.float64)
    with np.errstate(divide="ignore"):  # bucket 0's lower end: log10(0) = -inf, cut by any edge
        lo, hi = (np.log10(np.abs(a)), np.log10(np.abs(b))) if log else (np.minimum(a, b), np.maximum(a, b))
    return np.searchsorted(inner_edges, lo, side="right") != np.searchsorted(inner_edges, hi, side="right")


def test_large_tensors_histograms_come_from_the_one_sweep(trove, tmp_path):
    """Tensors of 65,536 values and more get the page's histograms from the statistics' sweep
    (2^16 float32 buckets, docs/stats.md): every finite value is counted once, and a bin differs
    from numpy's count by no more than the values of buckets an edge cuts. Exact figures are
    `stats --hist`'s."""
    g = torch.Generator().manual_seed(3)
    n = 1 << 17
    sd = {
        "normal": torch.randn(n, generator=g),
        "wide": torch.randn(n, generator=g) * torch.logspace(-6, 3, n),
        "bf16": torch.randn(n, generator=g).bfloat16(),
        "half": (torch.rand(n, generator=g) * 100 - 30).half(),
        "negative": -torch.rand(n, generator=g) - 1e-3,
        "relu": torch.relu(torch.randn(n, generator=g)),
        "ints": torch.randint(-128, 128, (n,), generator=g, dtype=torch.int8),
        "mask": torch.rand(n, generator=g) > 0.3,
        "nonfinite": torch.randn(n, generator=g),
        "constant": torch.full((n,), 0.25),
        "tiny": torch.randn(n, generator=g) * 1e-42,  # float32 subnormals
    }
    sd["nonfinite"][::7] = float("nan")
    sd["nonfinite"][1::11] = float("inf")
    sd["nonfinite"][2::13] = -float("inf")
    path = tmp_path / "big.pt"
    torch.save(sd, path)
    out = tmp_path / "big.html"
    report(trove, path, "-o", out)
    data, _ = embedded_data(out)
    got = {t["key"]: t for t in data["a"]["tensors"]}
    for k, t in sd.items():
        x = t.double().numpy().ravel() if t.dtype != torch.bool else t.numpy().astype(np.float64).ravel()
        f = x[np.isfinite(x)]
        h = got[k]["histogram"]
        lo, hi = h["range"]
        exact, edges = np.histogram(f, bins=32, range=(lo, hi))
        assert sum(h["counts"]) == f.size, k
        cut = _cut_by_an_edge(f, edges[1:-1])
        assert np.abs(np.array(h["counts"]) - exact).sum() <= 2 * cut.sum(), k
        nz = np.abs(f[f != 0])
        if nz.size == 0:
            continue
        lh = got[k]["log10_abs_histogram"]
        llo, lhi = lh["range"]
        lexact, ledges = np.histogram(np.log10(nz), bins=32, range=(llo, lhi))
        assert sum(lh["counts"]) == nz.size, k
        lcut = _cut_by_an_edge(f[f != 0], ledges[1:-1], log=True)
        assert np.abs(np.array(lh["counts"]) - lexact).sum() <= 2 * lcut.sum(), k
    # The exact counts, for comparison, from `stats --hist`.
    r = trove("stats", path, "normal", "--hist", "32", "--json")
    assert r.code == 0, r
    exact_normal = json.loads(r.out)["tensors"][0]["histogram"]["counts"]
    f = sd["normal"].double().numpy()
    assert exact_normal == np.histogram(f, bins=32, range=(f.min(), f.max()))[0].tolist()


def test_two_thousand_tensors_render_with_lazy_histograms(trove, tmp_path):
    sd = {f"blocks.{i // 10}.unit{i % 10}.weight": torch.full((4, 4), float(i)) for i in range(2000)}
    path = tmp_path / "many.pt"
    torch.save(sd, path)
    out = tmp_path / "many.html"
    report(trove, path, "-o", out)
    page = render(out)
    # One page of rows is built, not 2,000 (a report of 100,000 tensors took Chromium 84 s to
    # show when every row was built at once); the pager reaches the others, and a link names a
    # page as it names a filter or a sort.
    assert page.keys == list(sd)[:500], len(page.keys)
    assert "2,000 tensors, rows 1\u2013500" in "".join(page.text) and "page 1 of 4" in "".join(page.text)
    # Histograms are drawn as their rows come into view: some, not 500 up front.
    assert 0 < page.histograms < 500, page.histograms
    assert page.rects.get("treemap-section", 0) > 100
    seen = list(page.keys)
    for n in (2, 3, 4):
        seen += render(out, fragment=f"#page={n}").keys
    assert seen == list(sd)
    # Filtering and sorting work on every row, before the page is cut.
    last = render(out, fragment="#filter=blocks.199.*&sort=max-desc").keys
    assert last == [f"blocks.199.unit{u}.weight" for u in range(9, -1, -1)], last
    top = render(out, fragment="#sort=max-desc").keys
    assert top[0] == "blocks.199.unit9.weight" and len(top) == 500


def test_file_text_cannot_become_markup(trove, tmp_path):
    """Keys and values from a file reach the page as text: none can end the data block, start a
    script or an element, whatever it says. (Key paths %-encode '<' and '>'; the value tree's dict
    keys and strings are the file's own text.)"""
    attack = "</script><script>document.documentElement.setAttribute('data-pwned','1')</script>"
    tag = "<img src=x onerror=document.documentElement.setAttribute('data-pwned','2')>"
    keys = [attack, "<!--<script>", tag, "line\u2028sep\u2029x", "&amp;", "it's"]
    path = tmp_path / "keys.pt"
    torch.save({"model": {k: torch.ones(2) for k in keys},
                "config": {attack: tag, "<!--<script>": ["</script>", "\u2028"], "note": "</script><b>bold</b>"}}, path)
    out = tmp_path / "keys.html"
    report(trove, path, "-o", out)
    raw = out.read_text(encoding="utf-8")
    assert "</script><script>document" not in raw and "<!--<script>" not in raw and "<img src=x" not in raw
    assert "\u2028" not in raw and "\u2029" not in raw
    data, _ = embedded_data(out)
    shown_keys = sorted(t["key"] for t in data["a"]["tensors"])
    assert sorted(urllib.parse.unquote(k)[len("model/"):] for k in shown_keys) == sorted(keys)
    assert data["a"]["values"]["config"][attack] == tag
    page = render(out)
    assert "data-pwned" not in page.root_attrs
    assert page.scripts == 3  # the page's own: error hook, data, drawing
    assert sorted(page.keys) == shown_keys  # shown as the text they are
    text = "".join(page.text)
    for shown in (attack, tag, "<!--<script>", "</script><b>bold</b>"):
        assert shown in text, shown


def test_refuses_a_directory_as_output(trove, tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(3)}, path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = trove("report", path, "-o", out)
    assert r.code == 2 and "is a directory" in r.errtext, r
    assert os.listdir(out) == ["keep.txt"]


def test_readme_screenshot_is_a_small_png():
    """docs/report.png is what the README shows: a PNG, small enough for a README."""
    png = os.path.join(SOURCE, "docs", "report.png")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(png) < 300 * 1024
