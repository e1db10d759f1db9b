"""`trove info` on a training checkpoint shows what it holds at a glance: a long subtree (loop
state) does not hide its siblings (the hyperparameters), a long list of numbers is one line."""
import os
import subprocess

import torch

import conftest


def test_hyperparameters_are_not_hidden_by_loop_state(tmp_path):
    loops = {f"loop{i}": {f"progress{j}": {"ready": j, "completed": j} for j in range(20)} for i in range(3)}
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    sd = opt.state_dict()
    sd["param_groups"][0]["params"] = list(range(76))
    path = tmp_path / "last.ckpt"
    torch.save({"epoch": 9, "loops": loops, "optimizer_states": [sd], "state_dict": model.state_dict(),
                "hyper_parameters": {"batch_size": 32, "hidden": 256}}, path)
    p = subprocess.run([os.path.join(conftest.BIN_DIR, "trove"), "info", str(path)], capture_output=True, text=True)
    assert p.returncode == 0, p
    values = p.stdout[p.stdout.index("\nvalues\n"):]
    assert "batch_size: 32" in values and "hidden: 256" in values, values
    assert "loop0: dict of 20" in values and "state_dict: collections.OrderedDict of 2 tensors" in values, values
    assert "lr: 0.01" in values, values
    # cat of the list itself still prints every item.
    p = subprocess.run([os.path.join(conftest.BIN_DIR, "trove"), "cat", str(path), "optimizer_states/0/param_groups/0/params"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "75: 75" in p.stdout, p


def test_a_long_list_of_numbers_is_one_line(tmp_path):
    path = tmp_path / "groups.pt"
    torch.save({"param_groups": [{"params": list(range(76)), "lr": 0.1}]}, path)
    p = subprocess.run([os.path.join(conftest.BIN_DIR, "trove"), "info", str(path)], capture_output=True, text=True)
    assert p.returncode == 0, p
    assert "params: [0, 1, 2, 3, 4, ..., 75] (76 items)" in p.stdout, p.stdout


def test_parameters_are_the_model_s_and_tied_storage_counts_once(tmp_path):
    """A training checkpoint: the summary's parameters are the model's floating tensors, not the
    optimizer's moments, RNG states, running statistics or integer counters (the rule of
    core/tensor_role.h), tied weights count once, and the bytes count each storage once."""
    import argparse
    import json
    import random

    import numpy as np

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 8)).sum().backward()
    opt.step()
    embed = torch.nn.Embedding(100, 8)
    ck = {"epoch": 3, "args": argparse.Namespace(lr=1e-3), "model": model.state_dict(), "optimizer": opt.state_dict(),
          "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
          "tied": {"embed.weight": embed.weight, "lm_head.weight": embed.weight}}
    path = tmp_path / "train.ckpt"
    torch.save(ck, path)
    want = sum(p.numel() for p in model.parameters()) + embed.weight.numel()
    p = subprocess.run([os.path.join(conftest.BIN_DIR, "trove"), "info", str(path), "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p
    summary = json.loads(p.stdout)["summary"]
    assert summary["parameters"] == want, summary
    moments = [t for s in opt.state_dict()["state"].values() for t in s.values()]
    assert summary["optimizer_state"] == {"tensors": len(moments), "bytes": sum(t.numel() * t.element_size() for t in moments)}
    # running_mean, running_var, num_batches_tracked, the numpy and torch RNG states.
    assert summary["other"]["tensors"] == 5, summary
    stored = set()
    total = 0
    for t in list(model.state_dict().values()) + moments + [embed.weight, torch.get_rng_state()]:
        if t.storage().data_ptr() not in stored:
            stored.add(t.storage().data_ptr())
            total += t.storage().size() * t.element_size()
    total += np.random.get_state()[1].nbytes
    assert summary["bytes"] == total < path.stat().st_size, (summary, total)
    p = subprocess.run([os.path.join(conftest.BIN_DIR, "trove"), "info", str(path)], capture_output=True, text=True)
    assert f"  parameters         {want:,}\n" in p.stdout, p.stdout
    assert f"  optimizer state    {len(moments)} tensors (" in p.stdout, p.stdout


def test_parameter_groups_and_rng_states_are_one_line_each(tmp_path):
    """An optimizer's parameter groups, each on one line, and RNG states one line each (Python's
    random state, numpy's with its array), a tuple showing its tensor item; within 80 columns on
    an 80-column terminal."""
    import random

    import numpy as np

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW([{"params": [model.weight], "lr": 0.001}, {"params": [model.bias], "lr": 0.0001}])
    path = tmp_path / "state.pt"
    torch.save({"optimizer": opt.state_dict(), "rng": {"python": random.getstate(), "numpy": np.random.get_state()},
                "pair": (torch.ones(2), "x")}, path)
    for columns, python_state in ((120, "python: (3, (2147483648, "), (80, "python: (3, tuple of 625, None)")):
        p = subprocess.run([os.path.join(conftest.BIN_DIR, "trove"), "info", str(path)], capture_output=True, text=True,
                           env=dict(os.environ, COLUMNS=str(columns)))
        assert p.returncode == 0, p
        values = p.stdout[p.stdout.index("\nvalues\n"):].splitlines()
        groups = [line.strip() for line in values if line.strip().startswith(("0: {", "1: {"))]
        assert len(groups) == 2 and groups[0].startswith("0: {lr: 0.001, ") and groups[1].startswith("1: {lr: 0.0001, "), values
        assert any(python_state in line for line in values), values
        assert any("numpy: ('MT19937', tensor uint32[624], " in line for line in values), values
        assert any("pair: (tensor float32[2], 'x')" in line for line in values), values
        assert all(len(line) + 2 <= columns for line in values), [l for l in values if len(l) + 2 > columns]


def test_full_prints_the_whole_value_tree(tmp_path):
    """The overview gives each long subtree its share of 40 lines and ends it in "..."; --full
    prints every value on its line."""
    loops = {f"loop{i}": {f"progress{j}": {"ready": j, "completed": j} for j in range(20)} for i in range(3)}
    path = tmp_path / "loops.ckpt"
    torch.save({"epoch": 1, "loops": loops}, path)
    trove = os.path.join(conftest.BIN_DIR, "trove")
    overview = subprocess.run([trove, "info", str(path)], capture_output=True, text=True).stdout
    full = subprocess.run([trove, "info", str(path), "--full"], capture_output=True, text=True).stdout
    assert "progress19" not in overview and "..." in overview
    for i in range(3):
        for j in range(20):
            assert f"progress{j}: dict of 2" in full
    assert full.count("completed: 19") == 3, full


def test_depth_cuts_the_value_tree_too(tmp_path):
    """--depth N groups the tensor table by N key components and shows the values N levels deep:
    deeper containers are one line each."""
    path = tmp_path / "deep.ckpt"
    torch.save({"epoch": 2, "config": {"optim": {"lr": 0.5, "betas": {"b1": 0.9}}}, "w": torch.ones(2)}, path)
    trove = os.path.join(conftest.BIN_DIR, "trove")
    one = subprocess.run([trove, "info", str(path), "--depth", "1"], capture_output=True, text=True).stdout
    two = subprocess.run([trove, "info", str(path), "--depth", "2"], capture_output=True, text=True).stdout
    everything = subprocess.run([trove, "info", str(path)], capture_output=True, text=True).stdout
    assert "config: dict of 1" in one and "optim:" not in one and "epoch: 2" in one, one
    assert "optim: dict of 2" in two and "lr: 0.5" not in two, two
    assert "lr: 0.5" in everything and "b1: 0.9" in everything, everything
