"""The type stubs (trove/__init__.pyi, _trove.pyi, data.pyi) are what a Python user's type checker
sees, so they are checked as one would check them: mypy's stubtest compares every name, signature
and default of the stubs with the built module (trove, trove._trove, trove.data; what it may not
compare is in stubtest_allowlist.txt with its reason), and mypy --strict type-checks a script ported from
safetensors' safe_open and torch.load code against the stubs, and refuses one that misuses them.

Needs Debian's python3-mypy (scripts/install-deps --test installs it)."""
import os
import subprocess
import textwrap

import pytest

from conftest import BIN_DIR

BUILD = os.path.dirname(BIN_DIR)
PYTHON_DIR = os.path.join(BUILD, "python")


def mypy_available():
    r = subprocess.run(["/usr/bin/python3", "-c", "import mypy.stubtest"], capture_output=True)
    return r.returncode == 0


pytestmark = pytest.mark.skipif(not mypy_available(), reason="python3-mypy is not installed (scripts/install-deps --test)")


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory):
    # one cache for the module's runs: the first reads numpy's stubs (half a minute), the rest reuse it
    return str(tmp_path_factory.mktemp("mypy-cache"))


def env_for(cache):
    return dict(os.environ, PYTHONPATH=PYTHON_DIR, MYPY_CACHE_DIR=cache)


def test_stubtest_finds_the_stubs_equal_to_the_module(tmp_path, mypy_cache):
    allowlist = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubtest_allowlist.txt")
    r = subprocess.run(["/usr/bin/python3", "-m", "mypy.stubtest", "--concise", "--allowlist", allowlist, "trove"],
                       capture_output=True, text=True, env=env_for(mypy_cache), cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


USER_SCRIPT = '''
    """Ported from safetensors' safe_open and torch.load code: trove in their place."""
    import io
    from typing import Any

    import trove


    def shapes(path: str) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        with trove.open(path, framework="pt") as f:
            header: dict[str, str] | None = f.metadata()
            for key in f.keys():
                out[key] = f.get_slice(key).get_shape()
            if header is not None:
                out["__metadata__"] = [len(header)]
        return out


    def first_rows(path: str, key: str) -> Any:
        with trove.open(path) as f:
            return f.get_slice(key)[0:2]


    def load_state(blob: bytes) -> Any:
        return trove.load(io.BytesIO(blob), map_location="cpu", weights_only=True)


    def checked(path: str) -> bool:
        report: trove.Report = trove.verify(path)
        return report.ok and not report.findings


    def missing(path: str) -> str:
        try:
            with trove.open(path) as f:
                f.get_tensor("nope")
        except trove.KeyNotFoundError as e:
            return e.message
        except KeyError:
            return "a KeyError, as a dict gives"
        return ""


    trove.convert("in.pt", "out.safetensors", keys=["model.*"], dtype="bfloat16", rename={"model.": ""})
    trove.set_threads(2)
    version: str = trove.__version__
'''


def run_mypy(tmp_path, cache, source):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(["/usr/bin/python3", "-m", "mypy", "--strict", "--no-error-summary", str(script)],
                          capture_output=True, text=True, env=env_for(cache), cwd=tmp_path, timeout=600)


def test_a_script_ported_from_safe_open_and_torch_load_type_checks_strict(tmp_path, mypy_cache):
    r = run_mypy(tmp_path, mypy_cache, USER_SCRIPT)
    assert r.returncode == 0, r.stdout + r.stderr


MISUSES = [
    ('trove.open(3.5)', 'incompatible type "float"'),
    ('n: int = trove.open("a.pt").keys()', 'incompatible types in assignment'),
    ('trove.verify("a.pt").no_such_field', 'has no attribute "no_such_field"'),
    ('trove.convert("a.pt", "b.pt", dtyp="bfloat16")', 'unexpected keyword argument "dtyp"'),
    ('trove.set_threads("2")', 'incompatible type "str"'),
]


def test_misuse_is_refused_by_the_type_checker_line_by_line(tmp_path, mypy_cache):
    source = "import trove\n" + "".join(line + "\n" for line, _ in MISUSES)
    r = run_mypy(tmp_path, mypy_cache, source)
    assert r.returncode == 1, r.stdout + r.stderr
    for number, (line, complaint) in enumerate(MISUSES, start=2):
        said = [m.lower() for m in r.stdout.splitlines() if m.startswith(f"user_script.py:{number}: error:")]
        assert any(complaint in m for m in said), (line, r.stdout)
