// libFuzzer target for the Python bridge (src/python/trove_module.cpp: the value tree becoming
// Python objects, docs/python.md): the fuzzed bytes are the data.pkl of a torch zip
// (pickle_in_pt.h), loaded by the `trove` package in an embedded interpreter with
// trove.load(framework="np"), a File's values(), tree(), metadata() and every tensor. Each must
// return or raise a trove.Error subclass; any other Python exception (TypeError, RecursionError,
// UnicodeDecodeError...) is a finding, and so is a crash or a sanitizer report in the bridge,
// which is compiled into this target with the library (the extension's module, a built-in module
// here; the package's Python files come from the source tree). numpy is
// imported (python3-numpy); torch is not, so framework="pt" is left to tests/python.
#include <pybind11/embed.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pickle_in_pt.h"
#include "python/trove_module.cpp"  // NOLINT: the bridge itself, with PyInit__trove
#include "scratch_path.h"

namespace {

// Run on every input: only a trove.Error may come out of these calls.
constexpr const char* kEntry = R"PY(
import warnings
import trove

def entry(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calls = (lambda: trove.load(path, framework="np"), lambda: trove.open(path).values(),
                 lambda: trove.open(path, raw=True).tree(), lambda: trove.open(path).metadata(), lambda: tensors(path))
        for call in calls:
            try:
                call()
            except trove.Error:
                pass

def tensors(path):
    with trove.open(path, raw=True) as f:
        for key in f.keys():
            try:
                f.get_tensor(key)
            except trove.Error:
                pass
)PY";

py::object* g_entry = nullptr;  // never freed: the interpreter outlives every input

}  // namespace

// The interpreter's leftovers (caches, interned objects) are not leaks of an input.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // A built-in module is found only at the top level: the bridge is imported as `_trove` and
  // entered as the package's submodule, which `from . import _trove` then finds.
  PyImport_AppendInittab("_trove", PyInit__trove);
  py::initialize_interpreter();
  try {
    py::module_ sys = py::module_::import("sys");
    sys.attr("modules")["trove._trove"] = py::module_::import("_trove");
    sys.attr("path").attr("insert")(0, TROVE_PYTHON_SOURCE_DIR);
    py::module_::import("numpy");
    py::dict scope;
    py::exec(kEntry, scope);
    g_entry = new py::object(scope["entry"]);
  } catch (const py::error_already_set& e) {
    std::fprintf(stderr, "python_bridge_fuzz: cannot set up the interpreter (python3-numpy?): %s\n", e.what());
    std::exit(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = trove_fuzz::ScratchPath("python-bridge-fuzz", ".pt");
  if (!trove_fuzz::WritePickleAsPt(path, data, size)) return 0;
  try {
    (*g_entry)(path);
  } catch (const py::error_already_set& e) {
    std::fprintf(stderr, "python_bridge_fuzz: not a trove.Error: %s\n", e.what());
    __builtin_trap();
  }
  return 0;
}
