"""setuptools glue for `pip install .` (pyproject.toml): build_ext runs this project's CMake to build
the extension trove._trove (target _trove) and copies it into the wheel; the pure-Python files come
from src/python/trove as usual. The CMake build directory is build-pip/ (kept between installs, so
rebuilds are incremental; TROVE_PIP_BUILD_DIR chooses another). TROVE_PIP_PREBUILT names a build
tree that already holds python/trove/_trove*.so (a `make` build): it is packaged as it is, without
building. Nothing is downloaded."""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuildExt(build_ext):
    def build_extension(self, ext):
        prebuilt = os.environ.get("TROVE_PIP_PREBUILT")
        if prebuilt:
            self.install_built(os.path.join(prebuilt, "python", "trove"), ext)
            return
        build_dir = os.environ.get("TROVE_PIP_BUILD_DIR", os.path.join(ROOT, "build-pip"))
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     f"-DPython_EXECUTABLE={sys.executable}", "-DTROVE_BUILD_PYTHON=ON",
                     "-DTROVE_BUILD_TESTS=OFF", "-DTROVE_CHECK_LAYERS=OFF"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"] if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")) else []
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", build_dir, "--target", "_trove", "-j", jobs], check=True)
        self.install_built(os.path.join(build_dir, "python", "trove"), ext)

    def install_built(self, pkg, ext):
        built = [f for f in os.listdir(pkg) if f.startswith("_trove") and f.endswith(".so")]
        if len(built) != 1:
            raise RuntimeError(f"CMake did not build exactly one _trove*.so in {pkg} (found {built}); "
                               "is pybind11-dev / python3-dev installed?")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(os.path.join(pkg, built[0]), dest)


setup(ext_modules=[Extension("trove._trove", sources=[])], cmdclass={"build_ext": CMakeBuildExt})
