"""Hostile and careless inputs for `trove report`: file text made to break out of the page, value
trees too deep or too wide to draw, destinations that are not the report's. Each case runs under
the suite's bounds (hostile.run_hostile); pages that are written are opened in headless Chromium."""
import torch

from hostile import run_hostile
from pickles import EMPTY_DICT, MARK, PROTO2, SETITEMS, STOP, pickle_of, s, torch_zip
from report_page import render


def test_markup_in_keys_and_values_stays_text(tmp_path):
    attack = "</script><script>document.documentElement.setAttribute('data-pwned','1')</script>"
    comment = "<!--<script>"
    path = tmp_path / "evil.pt"
    torch.save({"w" + "\u2028": torch.ones(2), "&lt;b&gt;": torch.zeros(1),
                "meta": {attack: comment, comment: [attack, "\u2029"], "u": "\udcff".encode("utf-8", "surrogatepass")}},
               path)
    out = tmp_path / "evil.html"
    run_hostile("trove", "report", path, "-o", out, watch=tmp_path, allowed=[out], expect={0})
    raw = out.read_bytes()
    assert attack.encode() not in raw and comment.encode() not in raw
    page = render(out)
    assert "data-pwned" not in page.root_attrs
    assert page.scripts == 3
    text = "".join(page.text)
    assert attack in text and comment in text and "&lt;b&gt;" in text


def test_deep_value_tree_is_cut_not_recursed(tmp_path):
    n = 200_000
    body = PROTO2 + b"]" * n + b"a" * (n - 1) + STOP
    path = torch_zip(tmp_path / "deep.pt", body)
    out = tmp_path / "deep.html"
    r = run_hostile("trove", "report", path, "-o", out, watch=tmp_path, allowed=[out], expect={0, 2})
    if r.code == 2:
        assert r.errtext.startswith("trove: error: ") and "deep.pt" in r.errtext, r
        assert not out.exists()
        return
    page = render(out)
    assert "..." in "".join(page.text)


def memo_laughs(levels):
    # Each level is a list holding the previous level 10 times: 10^levels paths over 6 x levels nodes.
    body = b"\x80\x02]q\x000"
    for level in range(1, levels + 1):
        body += b"](" + (b"h" + bytes([level - 1])) * 10 + b"eq" + bytes([level]) + (b"0" if level < levels else b"")
    return body + b"."


def test_memo_billion_laughs_in_values_is_bounded(tmp_path):
    # 10^4 paths: within what trove walks again of shared subtrees; the page cuts to its node budget.
    path = torch_zip(tmp_path / "laughs.pt", memo_laughs(4))
    out = tmp_path / "laughs.html"
    run_hostile("trove", "report", path, "-o", out, watch=tmp_path, allowed=[out], expect={0})
    assert out.stat().st_size < 1 << 20
    assert "..." in "".join(render(out).text)
    # 10^6 paths over 36 nodes: refused, clearly, and no page written.
    path = torch_zip(tmp_path / "laughs6.pt", memo_laughs(6))
    out6 = tmp_path / "laughs6.html"
    r = run_hostile("trove", "report", path, "-o", out6, watch=tmp_path, expect={2})
    assert "shared subtrees" in r.errtext and "laughs6.pt" in r.errtext, r
    assert not out6.exists()


def test_output_that_is_a_directory_of_other_files_is_refused(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(3)}, path)
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text("someone else's")
    r = run_hostile("trove", "report", path, "-o", out, watch=tmp_path, expect={2})
    assert "site" in r.errtext and "directory" in r.errtext, r


def test_failed_report_leaves_the_previous_one_intact(tmp_path):
    good = tmp_path / "good.pt"
    torch.save({"w": torch.randn(100000)}, good)
    out = tmp_path / "r.html"
    run_hostile("trove", "report", good, "-o", out, watch=tmp_path, allowed=[out], expect={0})
    before = out.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[:200000])
    r = run_hostile("trove", "report", good, cut, "-o", out, watch=tmp_path, expect={2})
    assert "cut.pt" in r.errtext, r
    assert out.read_bytes() == before


def test_dict_keys_that_are_not_text(tmp_path):
    # Keys of every kind a pickle can make (ints, tuples, None, bytes) in the value tree.
    body = EMPTY_DICT + MARK + s("cfg") + EMPTY_DICT + MARK + b"J\x05\x00\x00\x00" + s("int key") + b"N" + s("none key") + \
        b")" + s("empty tuple key") + SETITEMS + SETITEMS
    path = torch_zip(tmp_path / "keys.pt", pickle_of(body))
    out = tmp_path / "keys.html"
    run_hostile("trove", "report", path, "-o", out, watch=tmp_path, allowed=[out], expect={0})
    text = "".join(render(out).text)
    assert "int key" in text and "none key" in text and "empty tuple key" in text


def test_output_that_is_an_input_is_refused(tmp_path):
    a = tmp_path / "base.pt"
    b = tmp_path / "tuned.pt"
    torch.save({"w": torch.ones(3)}, a)
    torch.save({"w": torch.zeros(3)}, b)
    (tmp_path / "link.pt").symlink_to(b)
    for out in (a, b, tmp_path / "link.pt"):
        r = run_hostile("trove", "report", a, b, "-o", out, watch=tmp_path, expect={2})
        assert "a source of this command" in r.errtext, r
