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


def rows(r):
    return [line for line in r.text.splitlines() if line.split(":")[0] in ("differs", "close", "changed", "dtype")]


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
    line = next(x for x in r.text.splitlines() if x.startswith("differs:   blocks.0.w:"))
    assert "float32 -> bfloat16" in line
    n = a["blocks.0.w"].numel()
    assert f" of {n:,} elements differ)" in line
    assert r.text.splitlines()[-1] == ("different: 4 common tensors (2 differ, 1 not comparable, 1 identical), "
                                       "0 only in A, 1 only in B, 0 value difference(s)")


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
    assert [x.split()[1].rstrip(":") for x in rows(r)] == ["f", "e", "b", "d", "a"], r.text
    r = trove("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--sort", "change", "--top", "2")
    assert [x.split()[1].rstrip(":") for x in rows(r)] == ["f", "e"], r.text
    assert "... 3 more tensor rows not shown (--top 2)" in r.text
    j = json.loads(trove("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--sort", "change", "--json").out)
    assert [x["key"] for x in j["tensors"]] == ["f", "e", "b", "d", "a", "c"]
    assert j["tensors"][1]["relative_l2"] == pytest.approx(1.0, rel=1e-6)
    r = trove("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--sort", "key", "--keys", "d", "--keys", "b",
              "--keys", "a", "--keys", "c")
    assert [x.split()[1].rstrip(":") for x in rows(r)] == ["a", "b", "d"], r.text
    assert r.text.splitlines()[-1].endswith(", 4 tensors not selected (--keys/--exclude)")
    r = trove("diff", tmp_path / "a.pt", tmp_path / "b.pt", "--keys", "nothing*")
    assert r.code == 2 and "select no tensor" in r.errtext, r
