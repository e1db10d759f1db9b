"""The Makefile's one build directory: `make`, `make demo` and `make install` configure it with the
tests off (they need neither GoogleTest nor torch), `make test` with them on, and each configures
again whenever the cache holds the other value, so switching reuses the library's objects instead
of building a second tree. cmake and ctest are stand-ins here that log how they were called."""
import os
import subprocess

from conftest import SOURCE

FAKE_CMAKE = """#!/bin/sh
# Logs its arguments; a configure writes the cache entry and build.ninja as CMake would.
echo "cmake $*" >> "$FAKE_LOG"
[ "$1" = --preset ] || exit 0
for a; do case "$a" in -DTROVE_BUILD_TESTS=*) tests=${a#*=} ;; esac; done
mkdir -p "$4" && echo "TROVE_BUILD_TESTS:BOOL=$tests" > "$4/CMakeCache.txt" && touch "$4/build.ninja"
"""
FAKE_CTEST = '#!/bin/sh\necho "ctest $*" >> "$FAKE_LOG"\n'
FAKE_TROVE = "#!/bin/sh\nexit 0\n"  # what scripts/demo runs


def write_exe(path, text):
    path.write_text(text)
    path.chmod(0o755)


def make_calls(tmp_path, target, *make_args):
    """The cmake and ctest calls `make TARGET` makes, package installation left out."""
    fake_bin, build, log = tmp_path / "fake-bin", tmp_path / "build", tmp_path / "calls.log"
    fake_bin.mkdir(exist_ok=True)
    write_exe(fake_bin / "cmake", FAKE_CMAKE)
    write_exe(fake_bin / "ctest", FAKE_CTEST)
    (build / "bin").mkdir(parents=True, exist_ok=True)
    write_exe(build / "bin" / "trove", FAKE_TROVE)
    log.write_text("")
    # The outer make's command-line variables (CI runs `make test CMAKE_FLAGS=...`) reach a make
    # started below it through MAKEFLAGS: this make starts from the environment alone.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKEOVERRIDES", "MFLAGS", "MAKELEVEL",
                                                           "CMAKE_FLAGS")}
    env.update({"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_LOG": str(log)})
    subprocess.run(["make", "-s", "-C", SOURCE, "-o", "deps", "-o", "test-deps", f"BUILD={build}", "JOBS=1", *make_args, target],
                   check=True, capture_output=True, env=env, timeout=120)
    return [line.replace(str(build), "BUILD") for line in log.read_text().splitlines()]


CONFIGURE_OFF = "cmake --preset default -B BUILD -DTROVE_BUILD_TESTS=OFF"
CONFIGURE_ON = "cmake --preset default -B BUILD -DTROVE_BUILD_TESTS=ON"
BUILD = "cmake --build BUILD -j 1"


def test_demo_then_test_then_install_switch_the_tests_in_one_directory(tmp_path):
    assert make_calls(tmp_path, "demo") == [CONFIGURE_OFF, BUILD]
    assert make_calls(tmp_path, "demo") == [BUILD]
    assert make_calls(tmp_path, "test") == [CONFIGURE_ON, BUILD, "ctest --output-on-failure -j 1 --timeout 1200"]
    assert make_calls(tmp_path, "install") == [CONFIGURE_OFF, BUILD, "cmake --install BUILD --prefix /usr/local"]
    assert make_calls(tmp_path, "build") == [BUILD]


def test_cmake_flags_configure_again(tmp_path):
    assert make_calls(tmp_path, "build") == [CONFIGURE_OFF, BUILD]
    assert make_calls(tmp_path, "build", "CMAKE_FLAGS=-DTROVE_BUILD_PYTHON=OFF") == \
        [CONFIGURE_OFF + " -DTROVE_BUILD_PYTHON=OFF", BUILD]
