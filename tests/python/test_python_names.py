"""What Python users look for first (issue 29): `trove.__version__` (the command line's),
`__all__` naming what exists, and a missing key raising a KeyError, as a dict's and
safetensors' safe_open's do, with the closest keys suggested."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import BIN_DIR

sys.path.insert(0, os.path.join(os.environ.get("TROVE_BUILD_DIR", "build"), "python"))
import trove  # noqa: E402


def test_version_is_the_command_line_s():
    out = subprocess.run([os.path.join(BIN_DIR, "trove"), "--version"], capture_output=True, text=True).stdout
    assert out.strip() == f"trove {trove.__version__}"


def test_all_names_exist():
    for name in trove.__all__:
        assert hasattr(trove, name), name


def test_a_missing_key_is_a_key_error_with_suggestions(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"encoder": {"weight": torch.ones(2)}, "bias": torch.zeros(1)}, path)
    with trove.open(path) as f:
        with pytest.raises(KeyError) as e:
            f["encoder/wieght"]
        assert isinstance(e.value, trove.NotFoundError) and isinstance(e.value, trove.KeyNotFoundError)
        assert "did you mean 'encoder/weight'" in str(e.value), str(e.value)
        with pytest.raises(trove.KeyNotFoundError):
            f.get_slice("nothing-like-it")
        assert list(f["encoder/weight"]) == [1.0, 1.0]
    # A missing file stays a FileNotFoundError, not a KeyError.
    with pytest.raises(FileNotFoundError) as e:
        trove.open(tmp_path / "absent.pt")
    assert not isinstance(e.value, KeyError)
