"""TorchScript archives (torch.jit.save) read as data (docs/pt.md, "TorchScript"): parameters,
buffers and constants' count under their module paths, compared with torch's own
`state_dict()` bit for bit; the code is never read, and scan lists it. Made by Debian's torch."""
import json
import os
import sys

import numpy as np
import pytest
import torch

from conftest import BIN_DIR  # noqa: F401

sys.path.insert(0, os.path.join(os.environ.get("TROVE_BUILD_DIR", "build"), "python"))
import trove as trove_module  # noqa: E402
import safetensors_spec as spec  # noqa: E402


def kp(name):
    return name.replace(".", "/")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)  # buffers: running_mean, running_var, num_batches_tracked
        self.rnn = torch.nn.LSTM(4, 5)     # _flat_weights: the same tensors again, in a list
        self.head = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))

    def forward(self, x):
        y = self.bn(self.conv(x)).mean(dim=(2, 3))
        out, _ = self.rnn(y.unsqueeze(0))
        return self.head(out[0])


@pytest.fixture(params=["script", "trace"])
def archive(request, tmp_path):
    torch.manual_seed(3)
    net = Net().eval()
    net.bn.running_mean.uniform_()
    m = torch.jit.script(net) if request.param == "script" else torch.jit.trace(net, torch.randn(2, 3, 8, 8))
    path = tmp_path / f"{request.param}.pt"
    m.save(str(path))
    return path, {k: v.detach().clone() for k, v in m.state_dict().items()}


def test_parameters_and_buffers_are_torch_s_state_dict(trove, archive):
    path, state = archive
    r = trove("info", path, "--json")
    assert r.code == 0, r
    j = json.loads(r.out)
    assert j["format"] == "torchscript"
    # Key paths join the module path with '/' where state_dict() joins it with '.'.
    keys = {t["key"] for t in j["tensors"]}
    assert {kp(n) for n in state} <= keys, {kp(n) for n in state} - keys
    for name, want in state.items():
        raw = trove("cat", path, kp(name), "--raw")
        assert raw.code == 0, (name, raw)
        assert raw.out == want.contiguous().numpy().tobytes(), name
    with trove_module.open(path, framework="pt") as f:
        for name, want in state.items():
            assert torch.equal(f.get_tensor(kp(name)), want), name


def test_code_is_listed_never_read_and_load_refuses(trove, archive):
    path, _ = archive
    s = trove("scan", path)
    assert s.code == 1 and "carries code" in s.text, s
    assert trove("verify", path).code == 0
    with pytest.raises(trove_module.RefusedError, match="TorchScript"):
        trove_module.load(path)


def test_convert_carries_the_tensors_and_says_the_code_is_left(trove, archive, tmp_path):
    path, state = archive
    out = tmp_path / "weights.safetensors"
    r = trove("convert", path, out)
    assert r.code == 0 and "its code" in r.errtext, r
    tensors, _ = spec.read(out.read_bytes())
    for name, want in state.items():
        dtype, shape, raw = tensors[kp(name)]
        assert shape == tuple(want.shape) and raw == want.contiguous().numpy().tobytes(), name
    pt = tmp_path / "weights.pt"
    assert trove("convert", path, pt).code == 0
    back = torch.load(pt, weights_only=True)

    def flat(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from flat(v, prefix + k + "/")
            elif isinstance(v, torch.Tensor):
                yield prefix + k, v
    got = dict(flat(back))
    for name, want in state.items():
        assert torch.equal(got[kp(name)], want), name


class WithConstants(torch.nn.Module):
    def forward(self, x):
        return x * torch.tensor([1.5, 2.5]) + torch.arange(2.0)


def test_constants_are_read_under_their_own_key(trove, tmp_path):
    """A trace captures torch.tensor(...) as a constant (constants.pkl, storages under constants/,
    numbered apart from data/'s): read under `(constants)`, carried by convert."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = torch.jit.trace(WithConstants(), torch.ones(2))
    path = tmp_path / "const.pt"
    m.save(str(path))
    r = trove("cat", path, "(constants)/0", "--raw")
    assert r.code == 0 and r.out == torch.tensor([1.5, 2.5]).numpy().tobytes(), r
    out = tmp_path / "c.pt"
    assert trove("convert", path, out).code == 0
    assert torch.equal(torch.load(out, weights_only=True)["(constants)"][0], torch.tensor([1.5, 2.5]))
