"""Tables fit the terminal: `trove info` on a checkpoint with long keys keeps each tensor on one
line at 80 and 120 columns (the key column cut in the middle), and prints keys whole when the
width is unknown (a pipe without $COLUMNS)."""
import os
import subprocess

import torch

import conftest

LONG = "model.gnn_model.gnn.layers.{}.trainable_kernelconv_set.{}.edge_attr_support_sc_weight"


def info(path, columns):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = str(columns)
    p = subprocess.run([os.path.join(conftest.BIN_DIR, "trove"), "info", str(path)], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 0, p
    return p.stdout.splitlines()


def test_long_keys_are_cut_in_the_middle_to_fit(tmp_path):
    path = tmp_path / "ck.pt"
    torch.save({LONG.format(i, j): torch.zeros(3) for i in range(3) for j in range(4)}, path)
    for columns in (80, 120):
        lines = info(path, columns)
        rows = [line for line in lines if "float32" in line and "[3]" in line]
        assert len(rows) == 12, lines
        assert all(len(line) <= columns for line in rows), (columns, rows)
        assert all("\u2026" in line for line in rows)
        # The end of a key (the parameter) is kept: it is what tells keys apart.
        assert all("sc_weight" in line for line in rows), rows
    whole = info(path, None)
    assert sum(LONG.format(0, 0) in line for line in whole) == 1
