"""The layers of docs/architecture.md, checked on the #include lines of src/ and include/.

The build links each layer alone (CMakeLists.txt: trove_layer_*, --no-undefined), which catches a
call upward; this catches what a link cannot see: an upward include of a header that only
declares types, constants or inline functions.
"""
import os
import re

from conftest import SOURCE

# Each layer and the layers it may include, as CMakeLists.txt's TROVE_LAYER_USES_* table says.
USES = {
    "core": {"core"},
    "zip": {"zip", "core"},
    "pickle": {"pickle", "core"},
    "formats": {"formats", "zip", "pickle", "core"},
    "ops": {"ops", "formats", "zip", "pickle", "core"},
    "cli": {"cli", "ops", "formats", "zip", "pickle", "core"},
    # The Python module, beside cli: public headers only (test_python_uses_public_headers_only).
    "python": {"python", "ops", "formats", "zip", "pickle", "core"},
}

# The public headers by the layer that implements what they declare.
PUBLIC = {
    "core": {"atomic_file.h", "diff.h", "document.h", "dtype.h", "element_codec.h", "error.h", "findings.h",
             "format.h", "io_mode.h", "quantizer.h", "shared_bytes.h", "tensor.h", "tensor_copy.h", "tensor_stats.h",
             "threads.h", "value.h", "version.h", "write_options.h"},
    "zip": {"zip_reader.h", "zip_writer.h"},
    "pickle": {"pickler.h", "unpickler.h"},
    "formats": {"convert_options.h", "gguf.h", "pipeline.h", "pskd.h", "pskd_dataset.h", "pt_writer.h", "safetensors.h", "tensordict.h"},
    "ops": {"checks.h", "convert.h", "file_digests.h", "open.h", "save.h"},
}
HEADER_LAYER = {h: layer for layer, hs in PUBLIC.items() for h in hs}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of_include(name):
    if name.startswith("trove/"):
        return HEADER_LAYER.get(name[len("trove/"):])
    first = name.split("/", 1)[0]
    return first if first in USES else None


def sources(root):
    for top in ("src", "include/trove"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".h", ".cpp", ".in")):
                    yield os.path.join(dirpath, f)


def layer_of_file(path, root):
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "include":
        return HEADER_LAYER.get(rel[-1])
    return rel[1] if rel[1] in USES else None


def test_every_public_header_has_a_layer():
    headers = set(os.listdir(os.path.join(SOURCE, "include", "trove")))
    missing = sorted(h for h in headers if h.endswith(".h") and h not in HEADER_LAYER)
    assert missing == [], f"add these headers to PUBLIC in {__file__}: {missing}"


def upward_includes(root):
    wrong = []
    for path in sources(root):
        layer = layer_of_file(path, root)
        if layer is None:
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for name in INCLUDE.findall(text):
            target = layer_of_include(name)
            if target is not None and target not in USES[layer]:
                wrong.append(f"{os.path.relpath(path, root)} ({layer}) includes {name} ({target})")
    return wrong


def test_no_include_points_upward():
    assert upward_includes(SOURCE) == []


def test_the_check_sees_an_upward_include(tmp_path):
    # A made-up tree: core reaching ops, a format reaching the command line, a header reaching up.
    for rel, line in [("src/core/a.cpp", '#include "trove/open.h"'),
                      ("src/formats/pt/b.cpp", '#include "cli/table.h"'),
                      ("src/zip/c.cpp", '#include "trove/zip_reader.h"'),
                      ("include/trove/value.h", '#include "trove/unpickler.h"')]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(line + "\n")
    assert sorted(upward_includes(str(tmp_path))) == [
        "include/trove/value.h (core) includes trove/unpickler.h (pickle)",
        "src/core/a.cpp (core) includes trove/open.h (ops)",
        "src/formats/pt/b.cpp (formats) includes cli/table.h (cli)",
    ]


def test_python_uses_public_headers_only():
    wrong = []
    for dirpath, _, files in os.walk(os.path.join(SOURCE, "src", "python")):
        for f in files:
            if f.endswith((".h", ".cpp")):
                with open(os.path.join(dirpath, f), encoding="utf-8") as src:
                    wrong += [f"{f}: {n}" for n in INCLUDE.findall(src.read()) if not n.startswith("trove/")]
    assert wrong == []
