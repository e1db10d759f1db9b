"""A generative test of the Python bridge (the C++ value tree -> Python objects): random
documents of nested dicts (odd keys, attributes), lists, tuples, sets, tensors (views, zero
strides, empty ones, Parameters), numpy arrays and scalars, RNG states, objects of classes trove
does not know (plain, slotted, list and dict subclasses, reduced ones), shared references and deep
nesting, saved by torch 1.13 in its zip and legacy layouts and several pickle protocols. Each
must come back from trove.load as the reference loader (stub_unpickler.py: nothing of the file
run) reads it: the same types, bits and sharing. Then each document's pickle is mutated byte by
byte, and trove.load, trove.open(...).values() and framework="np" may only return or raise a
trove.Error subclass.

A fixed seed and a bounded count in `make test` (a few seconds); TROVE_BRIDGE_FUZZ_COUNT=<n>
documents (and four mutants each) and TROVE_BRIDGE_FUZZ_SEED=<s> for more. `make fuzz` runs the
libFuzzer target of the same bridge (fuzz/python_bridge_fuzz.cpp); its seeds and saved findings
are fed here to the built module, as that target wraps them."""

import argparse
import collections
import glob
import io
import os
import random
import sys
import warnings
import zipfile

import pytest

BUILD_DIR = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PYDIR = os.path.join(BUILD_DIR, "python")
if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
    pytest.skip(f"the Python module was not built (no {PYDIR}/trove/_trove*.so)", allow_module_level=True)
sys.path.insert(0, PYDIR)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import trove  # noqa: E402
from stub_unpickler import assert_same, reference_load  # noqa: E402

COUNT = int(os.environ.get("TROVE_BRIDGE_FUZZ_COUNT", "40"))
SEED = int(os.environ.get("TROVE_BRIDGE_FUZZ_SEED", "20260325"))
MUTANTS = 4
PYTHON_DEPTH_CAP = 2000  # kMaxPythonDepth in src/python/trove_module.cpp


# Classes of the script's own: unknown to trove, stubs to the reference.
class Thing:
    pass


class Slotted:
    __slots__ = ("a", "b")


class Bag(list):
    pass


class Table(dict):
    pass


class Ordered(collections.OrderedDict):
    pass


class Made:
    def __init__(self, *args):
        self.args = args

    def __reduce__(self):
        return (Made, self.args)


def factory():
    return 0


TENSOR_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
                 torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128]
NUMPY_DTYPES = ["<f2", "<f4", "<f8", ">f4", ">f8", "i1", "<i2", "<i4", "<i8", ">i8", "u1", "<u2", "<u4", "<u8", "?",
                "<c8", "<c16", ">c16"]
TEXTS = ["", "a", "key", "h\u00e9", "\U0001F600", "x/y", "%", ".", "..", "a b", "\udc80", "s\ud800", "\x00\x1f"]


class Maker:
    """One random document: `make` returns a value, spending a node budget."""

    def __init__(self, rng):
        self.rng = rng
        self.budget = rng.randint(5, 60)
        self.shared = []       # mutable values made so far, to refer to again
        self.bases = []        # tensors other tensors may view

    def chance(self, p):
        return self.rng.random() < p

    def scalar(self):
        r = self.rng
        return r.choice([
            lambda: None, lambda: r.random() < 0.5, lambda: r.randint(-300, 300), lambda: r.randint(-2 ** 70, 2 ** 70),
            lambda: r.choice([0.0, -0.0, 1.5, float("inf"), float("-inf"), float("nan"), 1e-310, r.random()]),
            lambda: complex(r.random(), -r.random()), lambda: r.choice(TEXTS),
            lambda: bytes(r.randrange(256) for _ in range(r.randint(0, 5))),
            lambda: bytearray(b"ab"), lambda: r.choice([torch.float32, torch.int64, torch.bool]),
            lambda: torch.Size(r.randint(0, 5) for _ in range(r.randint(0, 3))),
            lambda: torch.device(r.choice(["cpu", "cuda", "meta"])), lambda: self.numpy_scalar(),
        ])()

    def key(self):
        r = self.rng
        return r.choice([
            lambda: r.choice(TEXTS), lambda: r.randint(-5, 5), lambda: 2 ** 70, lambda: r.choice([0.5, -0.0, True, None]),
            lambda: (r.randint(0, 3), r.choice(TEXTS)), lambda: frozenset({1, "a"}), lambda: b"\xff\x00",
            lambda: self.numpy_scalar(), lambda: Made(1) if r.random() < 0.5 else torch.ones(1),
        ])()

    def numpy_scalar(self):
        dtype = np.dtype(self.rng.choice(NUMPY_DTYPES))
        return np.frombuffer(bytes(self.rng.randrange(256) for _ in range(dtype.itemsize)), dtype=dtype)[0]

    def numpy_array(self):
        r = self.rng
        dtype = np.dtype(r.choice(NUMPY_DTYPES))
        shape = tuple(r.randint(0, 3) for _ in range(r.randint(0, 3)))
        raw = bytes(r.randrange(256) for _ in range(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize))
        a = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        return np.asfortranarray(a) if r.random() < 0.3 else a

    def tensor(self):
        r = self.rng
        if self.bases and r.random() < 0.5:
            base = r.choice(self.bases)
            n = base.numel()
            shape = [r.randint(0, 3) for _ in range(r.randint(0, 3))]
            strides = [r.randint(0, 3) for _ in shape]
            offset = r.randint(0, n)
            extent = offset + sum((d - 1) * s for d, s in zip(shape, strides) if d > 0)
            if 0 in shape or extent < n:
                return base.as_strided(shape, strides, offset)
        dtype = r.choice(TENSOR_DTYPES)
        shape = [r.randint(0, 4) for _ in range(r.randint(0, 3))]
        g = torch.Generator().manual_seed(r.randrange(1 << 30))
        t = (torch.randn(shape, generator=g, dtype=torch.float64) * 50).to(dtype)
        if r.random() < 0.3 and t.dim() == 2:
            t = t.t()
        if r.random() < 0.2 and dtype.is_floating_point:
            t = torch.nn.Parameter(t, requires_grad=r.random() < 0.5)
        self.bases.append(t.detach())
        return t

    def instance(self, depth):
        r = self.rng
        kind = r.randrange(6)
        if kind == 0:
            o = Thing()
            for k in range(r.randint(0, 3)):
                setattr(o, f"a{k}", self.make(depth + 1))
        elif kind == 1:
            o = Slotted()
            o.a = self.make(depth + 1)
        elif kind == 2:
            o = Bag(self.make(depth + 1) for _ in range(r.randint(0, 3)))
            if r.random() < 0.5:
                o.note = self.make(depth + 1)
        elif kind == 3:
            o = (Table if r.random() < 0.6 else Ordered)((f"k{k}", self.make(depth + 1)) for k in range(r.randint(0, 3)))
            if r.random() < 0.5:
                o.note = self.make(depth + 1)
        elif kind == 4:
            o = Made(*(self.make(depth + 1) for _ in range(r.randint(0, 2))))
        else:
            o = factory
        return o

    def container(self, depth):
        r = self.rng
        n = r.randint(0, 4)
        kind = r.randrange(9)
        if kind == 0:
            out = [self.make(depth + 1) for _ in range(n)]
        elif kind == 1:
            out = tuple(self.make(depth + 1) for _ in range(n))
        elif kind == 2:
            out = {self.key(): self.make(depth + 1) for _ in range(n)}
        elif kind == 3:
            out = collections.OrderedDict((r.choice(TEXTS), self.make(depth + 1)) for _ in range(n))
            if r.random() < 0.5:
                out._metadata = {"": {"version": r.randint(1, 3)}}
        elif kind == 4:
            out = (set if r.random() < 0.5 else frozenset)(self.key() for _ in range(n) if True)
            out = type(out)(k for k in out if not isinstance(k, (torch.Tensor, np.generic)))
        elif kind == 5:
            out = collections.defaultdict(r.choice([list, dict, None, factory]))
            out.update((f"d{k}", self.make(depth + 1)) for k in range(n))
        elif kind == 6:
            out = argparse.Namespace(**{f"n{k}": self.make(depth + 1) for k in range(n)})
        elif kind == 7:
            out = collections.Counter({f"c{k}": r.randint(0, 9) for k in range(n)})
        else:
            out = self.instance(depth)
        if not isinstance(out, (tuple, frozenset)):
            self.shared.append(out)
        return out

    def make(self, depth=0):
        r = self.rng
        self.budget -= 1
        if self.budget <= 0 or depth > 6:
            return self.scalar() if r.random() < 0.6 else self.tensor()
        roll = r.random()
        if roll < 0.1 and self.shared:
            return r.choice(self.shared)
        if roll < 0.3:
            return self.tensor()
        if roll < 0.4:
            return self.numpy_array()
        if roll < 0.5:
            return self.scalar()
        return self.container(depth)

    def document(self):
        doc = {"root": self.make()}
        r = self.rng
        if r.random() < 0.1:
            doc["rng"] = (np.random.RandomState(r.randrange(1 << 30)).get_state(),
                          np.random.default_rng(r.randrange(1 << 30)).bit_generator.state,
                          random.Random(r.randrange(1 << 30)).getstate(), torch.random.get_rng_state())
        if r.random() < 0.08:
            deep = leaf = []
            for _ in range(r.choice([30, 400, PYTHON_DEPTH_CAP + 50])):
                leaf.append([])
                leaf = leaf[0]
            doc["deep"] = deep
        return doc


def depth_of(obj):
    depth, seen = 0, set()
    stack = [(obj, 0)]
    while stack:
        o, d = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        depth = max(depth, d)
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend((v, d + 1) for v in o)
    return depth


def save(doc, path, rng):
    zipped = rng.random() < 0.7
    protocol = rng.choice([2, 2, 2, 4, 5]) if zipped or rng.random() < 0.5 else 2
    torch.save(doc, path, _use_new_zipfile_serialization=zipped, pickle_protocol=protocol)


def only_trove_errors(path):
    """trove's calls on `path` return or raise a trove.Error; anything else fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", trove.UnknownObjectsWarning)
        for call in (lambda: trove.load(path), lambda: trove.load(path, framework="np"),
                     lambda: trove.open(path).values(), lambda: trove.load(path, map_location=lambda s, loc: s)):
            try:
                call()
            except trove.Error:
                pass


def mutate(data, rng):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        op = rng.randrange(4)
        if op == 0 and at < len(data):
            data[at] = rng.randrange(256)
        elif op == 1:
            data[at:at] = bytes([rng.choice(b"(.)]}tlsaeubqhRNXK\x81\x85\x8c\x94\x8f\x90\x93")])
        elif op == 2 and at < len(data):
            del data[at:at + rng.randint(1, 8)]
        else:
            other = rng.randrange(len(data) + 1)
            data[at:at] = data[other:other + rng.randint(1, 16)]
    return bytes(data)


def mutants(path, rng, out_dir):
    """The file with its pickle mutated (a zip's data.pkl; a legacy file's bytes after its header)."""
    with open(path, "rb") as f:
        raw = f.read()
    for k in range(MUTANTS):
        out = os.path.join(out_dir, f"mutant{k}.pt")
        if raw.startswith(b"PK"):
            with zipfile.ZipFile(io.BytesIO(raw)) as z, zipfile.ZipFile(out, "w") as w:
                for name in z.namelist():
                    data = z.read(name)
                    w.writestr(name, mutate(data, rng) if name.endswith("data.pkl") else data)
        else:
            with open(out, "wb") as f:
                f.write(raw[:40] + mutate(raw[40:], rng))
        yield out


@pytest.fixture
def deep_recursion():
    """torch.save's pickler and the comparison recurse once a level: deep documents need more
    than Python's default 1000 frames."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, 20000))
    yield
    sys.setrecursionlimit(before)


def test_random_documents_load_as_the_reference_reads_them(tmp_path, deep_recursion):
    rng = random.Random(SEED)
    compared = mutated = 0
    for n in range(COUNT):
        doc = Maker(rng).document()
        path = str(tmp_path / f"doc{n}.pt")
        save(doc, path, rng)
        where = f"document {n} (seed {SEED})"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", trove.UnknownObjectsWarning)
            if depth_of(doc) > PYTHON_DEPTH_CAP - 5:
                with pytest.raises(trove.LimitError):
                    trove.load(path)
                continue
            try:
                got = trove.load(path)
            except trove.Error as e:
                raise AssertionError(f"{where}: trove refused it: {e}") from e
        ref = reference_load(path)
        try:
            assert_same(trove, got, ref)
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from None
        compared += 1
        for mutant in mutants(path, rng, str(tmp_path)):
            only_trove_errors(mutant)
            mutated += 1
    assert compared >= COUNT // 2 and mutated == compared * MUTANTS


def pickle_as_pt(pkl, path):
    """A fuzz input as fuzz/pickle_in_pt.h wraps it: data.pkl of a stored torch zip with one
    64-byte storage "0" (bytes i * 7 + 1)."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/data/0", bytes((i * 7 + 1) & 0xFF for i in range(64)))
        z.writestr("archive/version", b"3\n")
    return path


def test_the_libfuzzer_targets_inputs_fail_cleanly(tmp_path):
    """fuzz/corpus/python_bridge_fuzz (seeds) and fuzz/regressions/python_bridge_fuzz (findings)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fuzz")
    seeds = sorted(glob.glob(os.path.join(root, "corpus", "python_bridge_fuzz", "*")))
    findings = sorted(glob.glob(os.path.join(root, "regressions", "python_bridge_fuzz", "*")))
    assert seeds, "no seeds in fuzz/corpus/python_bridge_fuzz"
    for k, name in enumerate(seeds + findings):
        with open(name, "rb") as f:
            path = pickle_as_pt(f.read(), str(tmp_path / f"input{k}.pt"))
        only_trove_errors(path)
