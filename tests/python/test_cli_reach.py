"""The command line as a new user meets it: cat of any value, info's summary and filters, help
and suggestions for typos (issue: "A command line people enjoy")."""
import collections
import json

import pytest
import torch


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    d = tmp_path_factory.mktemp("ck")
    model = collections.OrderedDict()
    model["blocks.0.attn.weight"] = torch.arange(1024 * 1024, dtype=torch.float32).reshape(1024, 1024)
    model["blocks.0.attn.bias"] = torch.arange(10, dtype=torch.float32)
    model["blocks.1.attn.bias"] = torch.ones(3, dtype=torch.float16)
    obj = {"model": model, "epoch": 7, "config": {"lr": 0.001, "name": "tiny", "betas": (0.9, 0.999)},
           "losses": [1.5, 1.25], "optimizer": {"param_groups": [{"lr": 0.0003}]}}
    path = d / "ck.pt"
    torch.save(obj, path)
    return path


def test_cat_reaches_scalars_strings_lists_and_subtrees(trove, ck):
    r = trove("cat", ck, "epoch", "optimizer/param_groups/0/lr", "config/name", "losses")
    assert r.code == 0, r
    assert r.text.splitlines()[:4] == ["epoch = 7", "optimizer/param_groups/0/lr = 0.0003",
                                       "config/name = 'tiny'", "losses:"]
    r = trove("cat", ck, "config", "--json")
    assert r.code == 0 and json.loads(r.out) == {"schema_version": 1, "command": "cat", "key": "config",
                                                 "value": {"lr": 0.001, "name": "tiny", "betas": {"$tuple": [0.9, 0.999]}}}


def test_cat_globs_and_slices(trove, ck):
    r = trove("cat", ck, "model/*.bias", "--json")
    rows = [json.loads(l) for l in r.text.splitlines()]
    assert [x["key"] for x in rows] == ["model/blocks.0.attn.bias", "model/blocks.1.attn.bias"]
    r = trove("cat", ck, "model/blocks.0.attn.weight[1:3, ::512]", "--json")
    j = json.loads(r.out)
    assert j["shape"] == [2, 2] and j["data"] == [[1024, 1536], [2048, 2560]]
    r = trove("cat", ck, "model/blocks.0.attn.bias[-2]", "--json")
    assert json.loads(r.out)["data"] == 8
    r = trove("cat", ck, "model/blocks.0.attn.bias[10]")
    assert r.code == 2 and "out of range" in r.errtext
    r = trove("cat", ck, "model/*.nothing")
    assert r.code == 2 and "no key path matching" in r.errtext


def test_cat_summarises_a_large_tensor_like_numpy(trove, ck):
    r = trove("cat", ck, "model/blocks.0.attn.weight")
    lines = r.text.splitlines()
    assert r.code == 0 and lines[0] == "model/blocks.0.attn.weight: float32 [1024, 1024]"
    assert lines[1] == "[[0.0, 1.0, 2.0, ..., 1021.0, 1022.0, 1023.0],"  # floats read as floats
    assert lines[4] == " ...,"
    assert lines[-1].endswith("1048573.0, 1048574.0, 1048575.0]]") and len(lines) == 8
    r = trove("cat", ck, "model/blocks.0.attn.weight", "--head", "4")
    assert r.text.splitlines()[1] == "[[0.0, 1.0, 2.0, 3.0, ...]]"
    full = trove("cat", ck, "model/blocks.0.attn.bias", "--full")
    assert full.text.splitlines()[1] == "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]"


def test_cat_raw_of_a_value_is_refused(trove, ck):
    r = trove("cat", ck, "epoch", "--raw")
    assert r.code == 2 and "not a tensor" in r.errtext


def test_wrong_keys_get_suggestions(trove, ck):
    r = trove("cat", ck, "blocks.0.attn.weight")
    assert r.code == 2 and "did you mean 'model/blocks.0.attn.weight'" in r.errtext
    r = trove("cat", ck, "epoh")
    assert r.code == 2 and "did you mean 'epoch'" in r.errtext


def test_info_summary_filters_sort_and_depth(trove, ck):
    r = trove("info", ck)
    text = r.text
    assert r.code == 0
    assert "  parameters         1,048,589" in text and "float16 1 (6 bytes)" in text
    assert text.index("epoch: 7") < text.index("config: dict of 3") < text.index("model: collections.OrderedDict")
    r = trove("info", ck, "--keys", "model/*.bias", "--sort", "size")
    keys = [l.split()[0] for l in r.text.splitlines() if l.startswith("  model/")]
    assert keys == ["model/blocks.0.attn.bias", "model/blocks.1.attn.bias"]
    r = trove("info", ck, "--depth", "3")
    rows = [l.split() for l in r.text.splitlines() if l.startswith("  model/blocks.")]
    assert [row[0] for row in rows] == ["model/blocks.0", "model/blocks.1"]
    assert rows[0][1] == "2" and rows[0][2] == "1,048,586"
    r = trove("info", ck, "--keys", "nothing/*")
    assert r.code == 2 and "--keys 'nothing/*' select none of the 3 tensors" in r.errtext, r
    j = json.loads(trove("info", ck, "--json").out)
    assert j["summary"]["parameters"] == 1048589 and j["summary"]["by_dtype"]["float16"] == {"tensors": 1, "bytes": 6}


def test_help_and_typos(trove, ck):
    r = trove("inof", ck)
    assert r.code == 2 and "unknown command 'inof' (did you mean 'info'?)" in r.errtext
    r = trove("hepl")
    assert r.code == 2 and "did you mean 'help'" in r.errtext
    r = trove("help")
    assert r.code == 0 and "Usage: trove" in r.text
    r = trove("help", "cat")
    assert r.code == 0 and "Usage: trove cat" in r.text and "--head" in r.text
    r = trove("info", ck, "--jsn")
    assert r.code == 2 and "did you mean '--json'" in r.errtext and "trove info --help" in r.errtext
    r = trove("cat")
    assert r.code == 2 and "trove cat --help" in r.errtext


@pytest.mark.parametrize("args", [("info",), ("cat", "{p}", "w"), ("verify",), ("scan",), ("stats",),
                                  ("convert", "{p}", "out.tdz"), ("diff", "{p}", "{p}")])
def test_a_missing_file_is_named_once(trove, tmp_path, args):
    missing = str(tmp_path / "missing.pt")
    argv = [a.format(p=missing) for a in args] if len(args) > 1 else [args[0], missing]
    if args[0] == "convert":
        argv[2] = str(tmp_path / "out.tdz")
    r = trove(*argv)
    assert r.code == 2 and r.errtext.count("missing.pt") == 1, r
    assert "No such file or directory" in r.errtext


def test_a_glob_prints_the_subtrees_it_matches(trove, ck):
    """`cat ck '*'` prints every top-level value, subtrees included (as `cat ck KEY` prints a
    subtree), in the file's order; `**` still prints every leaf, each once."""
    r = trove("cat", ck, "*")
    assert r.code == 0, r
    heads = [l for l in r.text.splitlines() if not l.startswith(" ")]
    assert heads == ["model:", "epoch = 7", "config:", "losses:", "optimizer:"], r.text
    assert "collections.OrderedDict of 3 tensors" in r.text and "name: 'tiny'" in r.text
    r = trove("cat", ck, "config/*")
    assert [l for l in r.text.splitlines() if not l.startswith(" ")][:2] == ["config/lr = 0.001", "config/name = 'tiny'"]
    r = trove("cat", ck, "**", "--json")
    keys = [json.loads(l)["key"] for l in r.text.splitlines()]
    assert keys[:3] == ["model/blocks.0.attn.weight", "model/blocks.0.attn.bias", "model/blocks.1.attn.bias"]
    assert len(keys) == len(set(keys)) and "optimizer" not in keys and "optimizer/param_groups/0/lr" in keys


def test_keys_that_match_nothing_are_said_one_way(trove, ck, tmp_path):
    for args in (["info", ck], ["stats", ck], ["convert", ck, tmp_path / "out.pt"], ["diff", ck, ck]):
        r = trove(*args, "--keys", "nothing/*")
        assert r.code == 2 and "--keys 'nothing/*' select none of the " in r.errtext, (args, r)
        assert "tensors (trove info lists their keys)" in r.errtext, (args, r)
    assert not (tmp_path / "out.pt").exists()
