"""`make install PREFIX=...` gives a usable package at any prefix: a separate project builds against
it with CMake's find_package(trove) and with pkg-config (shared and --static), and each build reads
the example checkpoint the way torch does: tensor sums (strided and big-endian views included),
single elements and values found by key path."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

import ptfiles
from conftest import SOURCE

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(SOURCE, "build"))
CONSUMER = os.path.join(SOURCE, "examples", "consumer")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    # A prefix that is not the one the build was configured with, reached through a copy: what a
    # DESTDIR staging or a moved tree gives. The package must find itself from where it lies.
    staged = tmp_path_factory.mktemp("staged") / "opt" / "trove"
    subprocess.run(["cmake", "--install", BUILD, "--prefix", str(staged)], check=True, capture_output=True)
    moved = tmp_path_factory.mktemp("moved") / "elsewhere"
    shutil.copytree(staged, moved, symlinks=True)
    shutil.rmtree(staged)
    return moved


def pkg_config(prefix, *args):
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")}
    return subprocess.run(["pkg-config", *args, "trove"], capture_output=True, text=True, check=True, env=env).stdout.split()


def checkpoint(tmp_path):
    """Tensors laid out every way torch stores them, a value tree, and what each should read as."""
    torch.manual_seed(1)
    base = torch.randn(6, 4)
    sd = {
        "plain": torch.randn(3, 5),
        "transposed": base.t(),                   # strided view of a shared storage
        "slice": base[1:4, 2:],                  # offset and strides
        "half": torch.randn(4, 4).half(),
        "bf16": torch.randn(2, 8).bfloat16(),
        "f64": torch.randn(5, 2, dtype=torch.float64),
        "ints": torch.arange(10),
    }
    obj = {"model": sd, "epoch": 7, "config": {"lr": 0.25, "name": "tiny"}}
    path = tmp_path / "ck.pt"
    torch.save(obj, path)
    return path, sd


def expected_lines(sd):
    lines = {}
    for k, t in sd.items():
        s = float(t.double().sum()) if t.is_floating_point() else 0.0
        lines["model/" + k] = (s, float(t[0, 0].double()) if t.dim() == 2 and t.is_floating_point() else None)
    return lines


def check_output(out, sd):
    want = expected_lines(sd)
    got = {}
    for line in out.splitlines():
        if line.startswith("model/"):
            key = line.split()[0]
            s = float(line.split("sum=")[1].split()[0])
            first = float(line.split("[0,0]=")[1]) if "[0,0]=" in line else None
            got[key] = (s, first)
    assert set(got) == set(want)
    for k, (s, first) in want.items():
        assert abs(got[k][0] - s) <= 1e-4 * max(1.0, abs(s)), k
        if first is not None:
            assert got[k][1] == pytest.approx(first, rel=1e-6), k
    assert "epoch = 7" in out
    assert "config/lr = 0.25" in out
    assert "config/name = 'tiny'" in out
    assert "config/missing: absent" in out


def run_consumer(exe, path, env=None):
    return subprocess.run([str(exe), str(path), "epoch", "config/lr", "config/name", "config/missing"],
                          check=True, capture_output=True, text=True, env=env).stdout


def test_layout_and_pc_file_follow_the_prefix(prefix):
    assert (prefix / "bin" / "trove").exists()
    assert (prefix / "include" / "trove" / "open.h").exists()
    assert (prefix / "include" / "trove" / "version.h").exists()
    assert (prefix / "lib" / "libtrove.a").exists()
    assert (prefix / "lib" / "libtrove.so").exists()
    cflags = pkg_config(prefix, "--cflags")
    assert any(os.path.realpath(f[2:]) == os.path.realpath(prefix / "include") for f in cflags if f.startswith("-I"))
    libs = pkg_config(prefix, "--libs")
    assert "-ltrove" in libs
    assert any(os.path.realpath(f[2:]) == os.path.realpath(prefix / "lib") for f in libs if f.startswith("-L"))
    static = pkg_config(prefix, "--libs", "--static")
    for dep in ("-lfmt", "-lz", "-llzma", "-lnettle", "-ldeflate", "-lbz2"):
        assert dep in static
    version = subprocess.run([str(prefix / "bin" / "trove"), "--version"], capture_output=True, text=True).stdout
    assert pkg_config(prefix, "--modversion")[0] in version


def test_cmake_consumer(prefix, tmp_path):
    path, sd = checkpoint(tmp_path)
    build = tmp_path / "cmake-consumer"
    subprocess.run(["cmake", "-S", CONSUMER, "-B", str(build), "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    check_output(run_consumer(build / "list_tensors", path), sd)


@pytest.mark.parametrize("link", ["shared", "static"])
def test_pkg_config_consumer(prefix, tmp_path, link):
    path, sd = checkpoint(tmp_path)
    exe = tmp_path / f"list_tensors_{link}"
    flags = pkg_config(prefix, "--cflags", "--libs", *(["--static"] if link == "static" else []))
    cmd = ["g++", "-std=c++20", os.path.join(CONSUMER, "list_tensors.cpp"), "-o", str(exe)]
    if link == "static":
        # the static archive first, by name, so the shared library beside it is not chosen
        flags = [f for f in flags if f != "-ltrove"]
        cmd += [str(prefix / "lib" / "libtrove.a")] + flags
    else:
        cmd += flags + [f"-Wl,-rpath,{prefix / 'lib'}"]
    subprocess.run(cmd, check=True, capture_output=True)
    needed = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    assert ("libtrove.so" in needed) == (link == "shared")
    check_output(run_consumer(exe, path), sd)


def test_big_endian_views_read_like_torch(prefix, tmp_path):
    """A checkpoint as a big-endian machine writes it: the consumer's sums and elements match torch."""
    big, obj = ptfiles.make_big_endian(str(tmp_path))
    build = tmp_path / "cmake-consumer"
    subprocess.run(["cmake", "-S", CONSUMER, "-B", str(build), "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    out = subprocess.run([str(build / "list_tensors"), big], check=True, capture_output=True, text=True).stdout
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    for key in ("f", "h"):
        want = float(obj[key].double().sum())
        assert float(rows[key].split("sum=")[1].split()[0]) == pytest.approx(want, rel=1e-6), rows[key]
    assert float(rows["f"].split("[0,0]=")[1]) == float(obj["f"][0, 0])


def read_safetensors(path):
    """The tensors of a .safetensors file, read here from the format's own layout (8-byte header
    length, JSON header, data), not by trove."""
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        begin, end = spec["data_offsets"]
        dtype = {"F32": "<f4", "I64": "<i8"}[spec["dtype"]]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype).reshape(spec["shape"])
    return out


def test_typed_reads_and_short_writer(prefix, tmp_path):
    """examples/consumer/typed_io.cpp against the installed copy: Span<float> in place where the
    file stores float32 contiguously, ToVector<float> otherwise (bfloat16, a strided view), and
    trove::Save to .safetensors and .pt, read back by numpy and torch."""
    path, sd = checkpoint(tmp_path)
    build = tmp_path / "cmake-typed"
    subprocess.run(["cmake", "-S", CONSUMER, "-B", str(build), "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "typed_io"], check=True, capture_output=True)
    for key, where in (("plain", "zero-copy"), ("bf16", "copied"), ("transposed", "copied")):
        for out in (tmp_path / f"{key}.safetensors", tmp_path / f"{key}.pt"):
            r = subprocess.run([str(build / "typed_io"), str(path), "model/" + key, str(out)],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            assert where in r.stdout, r.stdout
            if where == "copied":
                assert "not in place: Span<float32>" in r.stdout, r.stdout
            want = sd[key].float() * 2
            if out.suffix == ".pt":
                got = torch.load(out, weights_only=True)
                assert torch.equal(got["doubled"], want)
                assert got["meta"]["count"].tolist() == [want.numel()]
            else:
                got = read_safetensors(out)
                np.testing.assert_array_equal(got["doubled"], want.numpy())
                assert got["meta/count"].tolist() == [want.numel()]
    r = subprocess.run([str(build / "typed_io"), str(path), "model/plain", str(tmp_path / "x.unknownext")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "typed_io:" in r.stderr, r
