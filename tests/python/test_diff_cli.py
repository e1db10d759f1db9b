"""trove diff's command line: values compared across dtypes (a cast's error as torch measures it),
prefix stripping, --keys/--exclude, --sort change, --top, and the counts in the text."""
import json

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture
def pair(tmp_path):
    torch.manual_seed(14)
    a = {"blocks.0.w": torch.randn(64, 64), "blocks.1.w": torch.randn(16) * 100, "head": torch.randn(3, 2),
         "ids": torch.arange(5)}
    # B: A's tensors cast to bfloat16 under "model." (as a wrapped module saves them), head reshaped.
    b = {"model." + k: (v.bfloat16() if v.is_floating_point() else v) for k, v in a.items()}
    b["model.head"] = torch.randn(2, 3)
    b["model.extra"] = torch.ones(1)
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    return tmp_path / "a.pt", tmp_path / "b.pt", a, b


STATUSES = ("differs", "close", "shape", "dtype", "from 0")


def rows(r):
    """The table's rows as (status, key, the other cells)."""
    out = []
    for line in r.text.splitlines():
        for status in STATUSES:
            if line.startswith("  " + status + " "):
                cells = line[2 + len(status):].split()
                out.append((status, cells[0], cells[1:]))
    return out


def keys(r):
    return [k for _, k, _ in rows(r)]


def test_cast_error_is_torchs(trove, pair):
    pa, pb, a, b = pair
    r = trove("diff", pa, pb, "--strip-prefix-b", "model", "--json")
    assert r.code == 1, r
    j = json.loads(r.out)
    assert j["only_in_a"] == [] and j["only_in_b"] == ["extra"]
    t = {x["key"]: x for x in j["tensors"]}
    for key in ("blocks.0.w", "blocks.1.w"):
        x, y = a[key].double(), b["model." + key].double()
        row = t[key]
        assert row["comparable"] is True and row["dtype_changed"] is True
        assert row["a"]["dtype"] == "float32" and row["b"]["dtype"] == "bfloat16"
        assert row["max_abs"] == (a[key] - b["model." + key].float()).abs().max().item()
        assert row["l2"] == pytest.approx((x - y).norm().item(), rel=1e-12)
        assert row["relative_l2"] == pytest.approx(((x - y).norm() / x.norm()).item(), rel=1e-12)
        assert row["elements"] == x.numel()
        assert row["elements_differing"] == int((x != y).sum())
        assert row["within_tolerance"] is False
    assert t["head"]["comparable"] is False
    assert t["ids"]["identical"] is True
    assert j["summary"] == {"common": 4, "differ": 2, "within_tolerance": 0, "equal_values": 0,
                            "not_comparable": 1, "identical": 1, "only_in_a": 0, "only_in_b": 1, "values": 0,
                            "skipped": 0}


def test_tolerance_and_ignore_dtype(trove, pair):
    pa, pb, _, _ = pair
    args = ("diff", pa, pb, "--strip-prefix", "model", "--exclude", "head", "--exclude", "extra")
    assert trove(*args).code == 1  # bfloat16 rounding
    r = trove(*args, "--rtol", "0.004", "--json")
    j = json.loads(r.out)
    assert all(x["within_tolerance"] for x in j["tensors"]), j
    assert r.code == 1  # the dtype changed
    assert j["summary"]["skipped"] == 3  # head in both, extra in B
    assert trove(*args, "--rtol", "0.004", "--ignore-dtype").code == 0
    assert trove(*args, "--rtol", "0.0001", "--ignore-dtype").code == 1


def test_text_says_what_counts_are(trove, pair):
    pa, pb, a, _ = pair
    r = trove("diff", pa, pb, "--strip-prefix", "model")
    assert r.code == 1
    row = next(cells for status, key, cells in rows(r) if key == "blocks.0.w" and status == "differs")
    assert row[:3] == ["float32", "->", "bfloat16"]
    x, y = a["blocks.0.w"].double(), a["blocks.0.w"].bfloat16().double()
    differing = int((x != y).sum())
    assert row[-1] == f"{100 * differing / x.numel():.4g}%"
    assert row[3] == f"{(x - y).abs().max().item():.4g}"
    assert r.text.splitlines()[-1] == "different: 4 common tensors (2 differ, 1 not comparable, 1 identical), 1 only in B"


def test_without_strip_nothing_matches(trove, pair):
    pa, pb, _, _ = pair
    j = json.loads(trove("diff", pa, pb, "--json").out)
    assert j["tensors"] == [] and len(j["only_in_a"]) == 4 and len(j["only_in_b"]) == 5


def test_sort_change_and_top(trove, tmp_path):
    torch.manual_seed(1)
    base = {k: torch.randn(100) for k in "abcdef"}
    other = {k: v.clone() for k, v in base.items()}
    scale = {"a": 1e-3, "b": 1e-1, "c": 0, "d": 1e-2, "e": 1.0, "f": 0}
    for k, s in scale.items():
        other[k] += s * base[k]  # relative change = s
    other["f"] = torch.randn(10, 10)  # a shape change: first
    torch.save(base, tmp_path / "a.pt")
    torch.save(other, tmp_path / "b.pt")
    r = trove("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--sort", "change")
    assert keys(r) == ["f", "e", "b", "d", "a"], r.text
    assert keys(trove("diff", tmp_path / "a.pt", tmp_path / "b.pt")) == keys(r)  # the default order
    r = trove("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--sort", "change", "--top", "2")
    assert keys(r) == ["f", "e"], r.text
    assert "... 3 more tensor rows not shown (--top 2)" in r.text
    j = json.loads(trove("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--sort", "change", "--json").out)
    assert [x["key"] for x in j["tensors"]] == ["f", "e", "b", "d", "a", "c"]
    assert j["tensors"][1]["relative_l2"] == pytest.approx(1.0, rel=1e-6)
    r = trove("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--sort", "key", "--keys", "d", "--keys", "b",
              "--keys", "a", "--keys", "c")
    assert keys(r) == ["a", "b", "d"], r.text
    assert r.text.splitlines()[-1].endswith(", 4 tensors not selected (--keys/--exclude)")
    r = trove("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--keys", "nothing*")
    assert r.code == 2 and "--keys 'nothing*' select none of the" in r.errtext, r


@pytest.fixture
def finetuned(tmp_path):
    """A base model and a fine-tuned copy: ordinary updates of different sizes, one element moved
    far, a zero-initialised bias and LoRA B that became non-zero, tensors left alone."""
    torch.manual_seed(29)
    long = "model.encoder.layers.11.self_attention.query_key_value.weight"
    a = {"embed.weight": torch.randn(100, 16), "q.weight": torch.randn(16, 16), "q.bias": torch.zeros(16),
         "mlp.w1": torch.randn(32, 16), "lora_B": torch.zeros(16, 4), "norm.weight": torch.ones(16),
         long: torch.randn(8, 8)}
    b = {k: v.clone() for k, v in a.items()}
    b["q.weight"] += 0.05 * torch.randn(16, 16)
    b["q.bias"] += 0.001 * torch.randn(16)
    b["lora_B"] += 0.5 * torch.randn(16, 4)
    b["mlp.w1"][3, 5] += 2.0
    b["norm.weight"][:4] *= 1.0001
    b[long] += 1e-3 * torch.randn(8, 8)
    torch.save(a, tmp_path / "base.pt")
    torch.save(b, tmp_path / "tuned.pt")
    return tmp_path / "base.pt", tmp_path / "tuned.pt", a, b, long


def test_zero_initialised_tensors_rank_after_real_changes(trove, finetuned):
    pa, pb, a, b, long = finetuned
    r = trove("diff", pa, pb)
    assert r.code == 1
    got = rows(r)
    rel = {k: ((b[k].double() - a[k].double()).norm() / a[k].double().norm()).item()
           for k in ("q.weight", "mlp.w1", "norm.weight", long)}
    ordinary = sorted(rel, key=rel.get, reverse=True)
    # Real changes first, largest ||a-b||/||a|| first; then what was all zeros, by ||b||.
    assert [k for s, k, _ in got] == ordinary + ["lora_B", "q.bias"], r.text
    assert [s for s, _, _ in got] == ["differs"] * 4 + ["from 0"] * 2
    for status, key, cells in got:
        if status == "differs":
            assert cells[-2] == f"{rel[key]:.4g}", (key, cells)
        else:
            assert cells[-4:-1] == ["(a", "=", "0)"], (key, cells)
    # The position of the largest difference, as an index into the shape.
    w1 = next(cells for _, k, cells in got if k == "mlp.w1")
    assert w1[2:4] == ["[3,", "5]"] and w1[1] == "2"
    assert w1[-1] == f"{100 / (32 * 16):.4g}%"
    j = json.loads(trove("diff", pa, pb, "--json").out)
    t = {x["key"]: x for x in j["tensors"]}
    assert t["mlp.w1"]["max_abs_at"] == [3, 5] and t["mlp.w1"]["from_zero"] is False
    assert t["lora_B"]["from_zero"] is True and t["lora_B"]["relative_l2"] is None
    assert [x["key"] for x in j["tensors"]][:6] == ordinary + ["lora_B", "q.bias"]


def test_tsv_has_every_digit(trove, finetuned):
    pa, pb, a, b, _ = finetuned
    r = trove("diff", pa, pb, "--tsv")
    lines = [x.split("\t") for x in r.text.splitlines() if "\t" in x]
    assert lines[0] == ["", "tensor", "dtype", "max|a-b|", "at", "rel. L2", "changed"]
    row = next(x for x in lines if x[1] == "q.weight")
    d = (b["q.weight"].double() - a["q.weight"].double())
    assert float(row[3]) == d.abs().max().item()
    assert float(row[5]) == pytest.approx((d.norm() / a["q.weight"].double().norm()).item(), rel=1e-12)


def test_stat_and_name_only(trove, finetuned):
    pa, pb, _, _, long = finetuned
    r = trove("diff", pa, pb, "--stat")
    assert r.code == 1
    lines = r.text.splitlines()
    assert lines[0].split()[:2] == ["tensor", "rel."]
    bars = {x.split()[0]: x.count("\u2588") for x in lines[1:-1]}
    # Log scale: a 1e-4 change still shows, a larger change has a longer bar.
    assert 0 < bars["norm.weight"] < bars[long] < bars["q.weight"] <= 40, r.text
    assert "was all zeros" in next(x for x in lines if x.split()[0] == "lora_B")
    assert lines[-1].startswith("different: 7 common tensors (6 differ, 1 identical)")
    r = trove("diff", pa, pb, "--name-only")
    assert r.code == 1
    assert sorted(r.text.splitlines()) == sorted(["q.weight", "q.bias", "mlp.w1", "lora_B", "norm.weight", long])
    r = trove("diff", pa, pa, "--name-only")
    assert r.code == 0 and r.text == ""
    assert trove("diff", pa, pb, "--stat", "--name-only").code != 0  # exclusive


def on_terminal(args, columns, env_extra=None):
    """Runs trove on a pseudo-terminal of `columns` columns and 50 rows, as a person sees it.
    Output taller than that would start a pager: none unless `env_extra` names one (PAGER or
    TROVE_PAGER), so that nothing waits for a key."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios

    import conftest

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "PAGER", "TROVE_PAGER", "LESS")}
    env["TERM"] = "xterm-256color"
    env["PAGER"] = "cat"
    env.update(env_extra or {})
    p = subprocess.Popen([os.path.join(conftest.BIN_DIR, "trove")] + [str(x) for x in args], stdout=slave,
                         stderr=slave, env=env)
    out = conftest.read_terminal(master, slave, p, timeout=60)
    return out.decode("utf-8").replace("\r\n", "\n")


@pytest.mark.parametrize("columns", [80, 120])
def test_table_fits_the_terminal_and_colours_changed_rows(finetuned, columns):
    import re

    pa, pb, _, _, long = finetuned
    out = on_terminal(["diff", pa, pb], columns)
    plain = re.sub("\x1b\\[[0-9;]*m", "", out)
    table = [x for x in plain.splitlines() if x.startswith("  ")]
    assert len(table) == 7 and all(len(x) <= columns for x in table), (columns, plain)
    if columns == 120:
        assert any(long in x for x in table)
    else:
        assert any(x.split()[1].startswith("model.") and "\u2026" in x.split()[1] and x.split()[1].endswith("weight")
                   for x in table), table
    # Changed rows in red, rows that were zeros too; the header and summary uncoloured.
    assert out.count("\x1b[31m") == 6 and "\x1b[" not in out.splitlines()[0]
    assert "\x1b[" not in on_terminal(["diff", pa, pb], columns, {"NO_COLOR": "1"})
    stat = re.sub("\x1b\\[[0-9;]*m", "", on_terminal(["diff", pa, pb, "--stat"], columns))
    assert all(len(x) <= columns for x in stat.splitlines()), stat
