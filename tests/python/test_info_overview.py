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
