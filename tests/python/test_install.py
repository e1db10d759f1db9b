"""`make install PREFIX=...` gives a usable package: a separate CMake project finds it with
find_package(trove), links it, and reads the example checkpoint; pkg-config knows it too."""
import os
import subprocess

import torch

from conftest import SOURCE

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(SOURCE, "build"))


def test_installed_package_builds_a_consumer(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", BUILD, "--prefix", str(prefix)], check=True, capture_output=True)
    assert (prefix / "bin" / "trove").exists()
    assert (prefix / "include" / "trove" / "open.h").exists()
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "trove"], capture_output=True, text=True, check=True,
                        env={**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")})
    assert "-ltrove" in pc.stdout
    build = tmp_path / "consumer"
    subprocess.run(["cmake", "-S", os.path.join(SOURCE, "examples", "consumer"), "-B", str(build), "-G", "Ninja",
                    f"-DCMAKE_PREFIX_PATH={prefix}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    example = os.path.join(SOURCE, "examples", "tiny_model.pt")
    out = subprocess.run([str(build / "list_tensors"), example], check=True, capture_output=True, text=True).stdout
    sd = torch.load(example)["model"]  # our own example file; it holds floats, which torch 1.13 weights_only cannot read
    want = float(sd["proj.bias"].double().sum())
    line = [l for l in out.splitlines() if l.startswith("model/proj.bias ")][0]
    assert abs(float(line.split("sum=")[1]) - want) < 1e-5
