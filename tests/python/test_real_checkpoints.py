"""Checkpoints as training code writes them (issue #13), read under the default policy.

Every file is made here by torch 1.13 / numpy (or, for layouts this torch no longer writes, from
pickle's own bytes as torch's loaders define them), and every tensor trove reads is compared with
what torch.load gives for the same file. The three classes of globals (docs/security.md): data
names are read as data, dangerous names refuse the file by name, anything else is an inert object
with one warning line; --strict refuses all but data, --permissive reads everything inert.
"""
import argparse
import collections
import io
import json
import os
import pickle
import struct
import tarfile

import numpy as np
import pytest
import torch

import ptfiles
import pickletools
import zipfile

import pickles
from realfiles import (LEGACY_MAGIC, MARKER, AttrDict, AttrOrderedDict, Box, Call, Config, Evil, MyDict, MyOrderedDict,
                       Outer, Parts, Pid, array_bytes, flatten, zero_tensor,
                       legacy_file, torchscript_2019, training_checkpoint)

def plain(v):
    """A value of trove's JSON (docs/json.md) as Python: tagged dicts and tuples untagged."""
    if isinstance(v, list):
        return [plain(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "$tuple" in v:
        return tuple(plain(x) for x in v["$tuple"])
    if "$dict" in v:
        return {plain(k): plain(x) for k, x in v["$dict"]}
    if any(k.startswith("$") for k in v):
        return v
    return {k: plain(x) for k, x in v.items()}


def info(trove, path, *flags):
    r = trove("info", path, "--json", *flags)
    assert r.code == 0, r
    return json.loads(r.out), r.errtext


def expect_same_tensors(trove, path, loaded):
    """Every tensor trove lists is torch.load's, byte for byte, in torch's order."""
    doc, _ = info(trove, path)
    expected = list(flatten(loaded))
    assert [t["key"] for t in doc["tensors"]] == [k for k, _ in expected]
    for key, t in expected:
        r = trove("cat", path, key, "--raw")
        assert r.code == 0, r
        assert r.out == array_bytes(t), key
    return doc


# ---- the files ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("real")
    out = {}
    ck = training_checkpoint()
    out["zip"] = str(d / "train.ckpt")
    torch.save(ck, out["zip"])
    for p in range(1, 6):
        out[f"legacy{p}"] = str(d / f"train-p{p}.ckpt")
        torch.save(ck, out[f"legacy{p}"], _use_new_zipfile_serialization=False, pickle_protocol=p)
    with_object = dict(ck, config=Config())
    out["object"] = str(d / "with-object.ckpt")
    torch.save(with_object, out["object"])
    torch.manual_seed(1)
    module = torch.nn.Linear(3, 2)
    out["module_legacy"] = str(d / "module-legacy.pt")
    torch.save(module, out["module_legacy"], _use_new_zipfile_serialization=False)
    out["module_zip"] = str(d / "module.pt")
    torch.save(module, out["module_zip"])
    out["evil"] = str(d / "evil.pt")
    torch.save({"w": torch.ones(2), "e": Evil()}, out["evil"])
    return out


# ---- every legacy pickle protocol, as torch.save writes it ---------------------------------------

@pytest.mark.parametrize("case", ["zip", "legacy1", "legacy2", "legacy3", "legacy4", "legacy5"])
def test_training_checkpoint_reads_as_torch_loads_it(trove, files, case):
    path = files[case]
    loaded = torch.load(path)
    doc = expect_same_tensors(trove, path, loaded)
    assert doc["format"] == ("pt" if case == "zip" else "pt-legacy")
    values = doc["values"]
    assert values["hyper_parameters"]["torch_version"] == str(torch.__version__)
    assert values["hyper_parameters"]["optimizer"] == {"$global": "torch.optim.adam.Adam"}
    assert plain(values["hparams"]) == {"lr": 0.1, "layers": 3}
    assert values["shape"] == {"$tuple": [2, 3], "$class": "torch.Size"}
    scalars = plain(values["optimizer_states"][0]["state"])[0]
    assert scalars["np_scalar_int"] == 7 and scalars["np_scalar_float"] == 0.25 and scalars["np_scalar_half"] == 1.5
    # No object of an unknown class (the dict subclasses are dicts): no warning, verify is clean.
    r = trove("info", path)
    assert r.code == 0 and "warning" not in r.errtext, r
    assert trove("verify", path).code == 0
    assert trove("info", path, "--permissive").code == 0


def test_strict_refuses_what_is_not_a_data_name(trove, files):
    # The optimizer class is a name of no data meaning (read as a name by default) and the dict
    # subclasses are classes of the script's: strict refuses the first it meets.
    r = trove("info", files["zip"], "--strict")
    assert r.code == 2 and "refused global" in r.errtext, r


def test_every_pickle_protocol_of_the_legacy_format(trove, tmp_path):
    obj = {"w": torch.arange(6.0).reshape(2, 3), "n": 3}
    for p in range(1, 6):
        path = str(tmp_path / f"p{p}.pt")
        torch.save(obj, path, _use_new_zipfile_serialization=False, pickle_protocol=p)
        expect_same_tensors(trove, path, torch.load(path))
    # Protocol 0 writes persistent ids as text, which torch.load cannot read back either: a file
    # without tensors reads, one with tensors is refused with that reason.
    path = str(tmp_path / "p0-plain.pt")
    torch.save({"n": 3, "s": "x"}, path, _use_new_zipfile_serialization=False, pickle_protocol=0)
    assert torch.load(path) == {"n": 3, "s": "x"}
    doc, _ = info(trove, path)
    assert doc["format"] == "pt-legacy" and doc["values"] == {"n": 3, "s": "x"}
    path = str(tmp_path / "p0.pt")
    torch.save(obj, path, _use_new_zipfile_serialization=False, pickle_protocol=0)
    with pytest.raises(Exception):
        torch.load(path)
    r = trove("info", path)
    assert r.code == 2 and "pickle protocol 0" in r.errtext and "torch.load cannot read it either" in r.errtext, r


# ---- verify and convert under the default policy -------------------------------------------------

def test_data_only_checkpoint_converts_and_keeps_its_classes(trove, files, tmp_path):
    src = files["zip"]
    out = str(tmp_path / "out.pt")
    r = trove("convert", src, out)
    assert r.code == 0, r
    want, got = torch.load(src), torch.load(out)
    assert type(got["shape"]) is torch.Size and got["shape"] == want["shape"]
    assert type(got["hparams"]) is argparse.Namespace and vars(got["hparams"]) == vars(want["hparams"])
    assert type(got["counts"]) is collections.defaultdict and got["counts"].default_factory is list
    assert type(got["mine"]) is MyDict and type(got["mine_ordered"]) is MyOrderedDict
    assert got["hyper_parameters"]["optimizer"] is torch.optim.Adam
    assert got["hyper_parameters"]["torch_version"] == str(torch.__version__)
    for (key, a), (_, b) in zip(flatten(want), flatten(got)):
        assert np.array_equal(np.asarray(a), np.asarray(b)), key
    assert trove("verify", out).code == 0
    # A torch.Size is not a tuple: formats that cannot hold one refuse it by name.
    small = str(tmp_path / "size.pt")
    torch.save({"w": torch.ones(2), "shape": torch.Size([2, 3])}, small)
    for dst in ("s.tdz", "s.safetensors"):
        r = trove("convert", small, str(tmp_path / dst))
        assert r.code == 2 and "'shape'" in r.errtext, r
    r = trove("convert", small, str(tmp_path / "s.safetensors"), "--drop-values")
    assert r.code == 0, r


def test_unknown_objects_read_and_convert_only_when_asked(trove, files, tmp_path):
    src = files["object"]
    want = torch.load(src)
    doc, err = info(trove, src)
    assert err.count("\n") == 1 and "warning" in err and "Config" in err, err
    assert "config/extra" in [t["key"] for t in doc["tensors"]]
    assert doc["values"]["config"]["$object"].endswith("Config")
    r = trove("cat", src, "config/extra", "--raw")
    assert r.code == 0 and r.out == ptfiles.tensor_bytes(want["config"].extra)
    assert trove("stats", src, "config/extra").code == 0
    v = trove("verify", src)
    assert v.code == 0 and "Config" in v.text, v
    # convert to a format that holds data alone: an error listing them by key path, nothing written
    tdz = str(tmp_path / "o.tdz")
    r = trove("convert", src, tdz)
    assert r.code == 2 and "'config'" in r.errtext and "--drop-unknown" in r.errtext and not os.path.exists(tdz), r
    r = trove("convert", src, tdz, "--keep-unknown")
    assert r.code == 2 and "only to a single .pt" in r.errtext, r
    # .pt to .pt: written back as read without being asked (nothing lost); torch.load makes the
    # same object. --drop-unknown still leaves it out.
    out = str(tmp_path / "o.pt")
    r = trove("convert", src, out)
    assert r.code == 0, r
    assert "config" not in torch.load(trove_convert_dropping(trove, src, tmp_path))
    back = torch.load(out)
    assert type(back["config"]) is Config and back["config"].lr == 0.1
    assert torch.equal(back["config"].extra, want["config"].extra)
    # --drop-unknown: left out, and the note says which
    dropped = str(tmp_path / "dropped.pt")
    r = trove("convert", src, dropped, "--drop-unknown")
    assert r.code == 0 and "dropped 1 object" in r.errtext and "'config'" in r.errtext, r
    assert "config" not in torch.load(dropped) and torch.equal(torch.load(dropped)["mine"]["a"], want["mine"]["a"])


def test_whole_module_saves(trove, files, tmp_path):
    for case in ("module_legacy", "module_zip"):
        path = files[case]
        want = torch.load(path)
        doc, err = info(trove, path)
        assert "torch.nn.modules.linear.Linear" in err, err
        keys = [t["key"] for t in doc["tensors"]]
        assert keys == ["_parameters/weight", "_parameters/bias"]
        for key, t in (("_parameters/weight", want.weight), ("_parameters/bias", want.bias)):
            assert trove("cat", path, key, "--raw").out == ptfiles.tensor_bytes(t)
        assert trove("info", path, "--strict").code == 2
        out = str(tmp_path / (case + ".pt"))
        r = trove("convert", path, out, "--keep-unknown")
        assert r.code == 0, r
        back = torch.load(out)
        assert isinstance(back, torch.nn.Linear) and torch.equal(back.weight, want.weight)
        # Every tensor sits inside the module: dropping it would leave nothing.
        r = trove("convert", path, str(tmp_path / "none.pt"), "--drop-unknown")
        assert r.code == 2 and "would leave none" in r.errtext, r


def test_dangerous_globals_refuse_the_file_by_name(trove, files, tmp_path):
    path = files["evil"]
    for cmd in (("info", path), ("cat", path, "w"), ("convert", path, str(tmp_path / "x.pt")), ("stats", path)):
        r = trove(*cmd)
        assert r.code == 2 and "refused global 'posix.system'" in r.errtext and "exec" in r.errtext, (cmd, r)
    assert not os.path.exists(MARKER)
    r = trove("info", path, "--permissive")
    assert r.code == 0 and "posix.system" in r.errtext, r
    assert not os.path.exists(MARKER)
    r = trove("scan", path, "--json")
    classes = {g["name"]: g["class"] for g in json.loads(r.out)["files"][0]["globals"]}
    assert classes["posix.system"] == "dangerous" and classes["torch._utils._rebuild_tensor_v2"] == "data"


def test_scan_shows_the_class_of_each_global(trove, files):
    r = trove("scan", files["object"], "--json")
    classes = {g["name"]: g["class"] for g in json.loads(r.out)["files"][0]["globals"]}
    assert classes["torch.optim.adam.Adam"] == "name"
    assert classes["realfiles.Config"] == "unknown"
    assert classes["realfiles.MyDict"] == "unknown"
    assert classes["numpy.core.multiarray._reconstruct"] == "data"
    assert classes["argparse.Namespace"] == "data" and classes["torch.torch_version.TorchVersion"] == "data"


# ---- keys that spell one component ---------------------------------------------------------------

def test_keys_that_spell_one_component_stay_apart(trove, tmp_path):
    obj = {1: torch.tensor([1.0]), "1": torch.tensor([2.0]), None: torch.tensor([3.0]), "None": torch.tensor([4.0]),
           (1, 2): torch.tensor([5.0]), "(1, 2)": torch.tensor([6.0]), 2: torch.tensor([7.0])}
    path = str(tmp_path / "keys.pt")
    torch.save(obj, path)
    doc, _ = info(trove, path)
    keys = [t["key"] for t in doc["tensors"]]
    assert keys == ["%int:1", "1", "%None:None", "None", "%tuple:(1,%202)", "(1,%202)", "2"]
    for key, t in zip(keys, obj.values()):
        assert trove("cat", path, key, "--raw").out == ptfiles.tensor_bytes(t), key
    out = str(tmp_path / "one.pt")
    assert trove("convert", path, out, "--keys", "%int:1").code == 0
    assert list(torch.load(out)) == [1]


# ---- layouts trove recognises and refuses --------------------------------------------------------

def test_code_archives_are_refused_by_name(trove, tmp_path):
    m = torch.jit.script(torch.nn.Linear(2, 2))
    cases = {}
    cases["lite.ptl"] = "a TorchScript mobile archive (bytecode.pkl"
    m._save_for_lite_interpreter(str(tmp_path / "lite.ptl"))
    cases["flat.ptl"] = "a TorchScript mobile archive (flatbuffer"
    m._save_for_lite_interpreter(str(tmp_path / "flat.ptl"), _use_flatbuffer=True)
    from torch.package import PackageExporter
    with PackageExporter(str(tmp_path / "pkg.pt")) as pe:
        pe.intern("**")
        pe.save_pickle("model", "model.pkl", {"w": torch.ones(2)})
    cases["pkg.pt"] = "a torch.package archive"
    torchscript_2019(str(tmp_path / "old-script.pt"))
    cases["old-script.pt"] = "a TorchScript archive of torch 1.0-1.2 (model.json, attributes.pkl, tensors/)"
    (tmp_path / "preview.pt").write_bytes(b"PYTORCH1" + bytes(64))
    cases["preview.pt"] = "the 1.0 preview"
    for name, what in cases.items():
        path = str(tmp_path / name)
        r = trove("info", path)
        assert r.code == 2 and what in r.errtext and "refused" in r.errtext, (name, r)
        s = trove("scan", path)
        assert s.code == 1 and "high" in s.text, (name, s)
        assert trove("verify", path).code == 1, name


def test_tar_checkpoints_and_what_is_no_checkpoint(trove, tmp_path):
    def tar(path, names):
        with tarfile.open(path, "w") as t:
            for name in names:
                data = pickle.dumps(0, protocol=2)
                member = tarfile.TarInfo(name)
                member.size = len(data)
                t.addfile(member, io.BytesIO(data))
    tar(str(tmp_path / "old.pt"), ["sys_info", "pickle", "storages", "tensors"])
    r = trove("info", str(tmp_path / "old.pt"))
    assert r.code == 2 and "a checkpoint of torch < 0.4" in r.errtext, r
    tar(str(tmp_path / "other.tar"), ["readme.txt"])
    r = trove("info", str(tmp_path / "other.tar"))
    assert r.code == 2 and "a tar archive, but not a torch checkpoint" in r.errtext, r
    with open(tmp_path / "plain.pkl", "wb") as f:
        pickle.dump({"w": [1, 2]}, f)
    r = trove("info", str(tmp_path / "plain.pkl"))
    assert r.code == 2 and "a pickle, but not a torch checkpoint" in r.errtext, r
    (tmp_path / "notes.txt").write_text("hello")
    r = trove("info", str(tmp_path / "notes.txt"))
    assert r.code == 2 and "not a checkpoint" in r.errtext, r


# ---- layouts of old torch, written from pickle's own bytes ----------------------------------------

def test_storage_views_and_tensor_state_of_old_torch(trove, tmp_path):
    floats = struct.pack("<12f", *range(12))
    whole = Pid(("storage", torch.FloatStorage, "root", "cpu", 12, None))
    # torch < 0.4: a view (view key, offset, size in elements) over the root storage
    view = Pid(("storage", torch.FloatStorage, "root", "cpu", 12, ("view1", 4, 6)))
    path = str(tmp_path / "views.pt")
    legacy_file(path, {"v": Call(torch._utils._rebuild_tensor, (view, 1, (2, 2), (2, 1))),
                       "w": Call(torch._utils._rebuild_tensor, (whole, 0, (3, 4), (4, 1)))}, {"root": floats})
    expect_same_tensors(trove, path, torch.load(path))
    # A tensor reaching past its view is refused, though it lies inside the root storage.
    bad = str(tmp_path / "past-view.pt")
    legacy_file(bad, {"v": Call(torch._utils._rebuild_tensor, (view, 4, (3,), (1,)))}, {"root": floats})
    r = trove("info", bad)
    assert r.code == 2 and "past its storage view" in r.errtext, r
    outside = Pid(("storage", torch.FloatStorage, "root", "cpu", 12, ("view2", 8, 6)))
    legacy_file(bad, {"v": Call(torch._utils._rebuild_tensor, (outside, 0, (2,), (1,)))}, {"root": floats})
    r = trove("info", bad)
    assert r.code == 2 and "lies outside storage 'root'" in r.errtext, r
    # torch.Tensor() and BUILD of (storage, offset, size, stride); a Variable's 5-tuple holds one
    path = str(tmp_path / "state.pt")
    inner = Call(torch._utils._rebuild_tensor, (whole, 0, (12,), (1,)))
    legacy_file(path, {"t": Call(torch.Tensor, (), (whole, 2, (2, 3), (3, 1))),
                       "var": Call(torch.Tensor, (), (inner, None, collections.OrderedDict(), True, None))},
                {"root": floats})
    loaded = torch.load(path)
    assert loaded["var"].requires_grad
    expect_same_tensors(trove, path, loaded)


# ---- where tensors hide: attributes, object parts, nested classes ---------------------------------

def data_pkl(path):
    with zipfile.ZipFile(path) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


def pickle_globals(pkl):
    """Every global a pickle names, as (module, name): GLOBAL's operands, STACK_GLOBAL's strings."""
    out, strings = [], []
    for op, arg, _ in pickletools.genops(pkl):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
            strings.append(arg)
        elif op.name == "GLOBAL":
            out.append(tuple(arg.split(" ", 1)))
        elif op.name == "STACK_GLOBAL":
            out.append((strings[-2], strings[-1]))
    return out


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_tensors_in_the_attributes_of_dict_subclasses(trove, tmp_path, layout):
    d = AttrDict(a=torch.zeros(2))
    d.extra = torch.ones(3)
    d.note = "hi"
    o = AttrOrderedDict(b=torch.full((2,), 5.0))
    o.more = {"t": torch.arange(4.0)}
    path = str(tmp_path / "attrs.pt")
    torch.save({"d": d, "o": o}, path, _use_new_zipfile_serialization=layout == "zip")
    want = torch.load(path)
    assert vars(want["d"])["extra"] is not None and vars(want["o"])["more"]["t"] is not None
    # Entries by key, then the attributes as %attr:<name> (docs/pt.md); only their tensors are listed.
    doc, err = info(trove, path)
    expected = {"d/a": want["d"]["a"], "d/%attr:extra": want["d"].extra, "o/b": want["o"]["b"],
                "o/%attr:more/t": want["o"].more["t"]}
    assert [t["key"] for t in doc["tensors"]] == list(expected) and "warning" not in err
    for key, t in expected.items():
        r = trove("cat", path, key, "--raw")
        assert r.code == 0 and r.out == ptfiles.tensor_bytes(t), (key, r)
    r = trove("cat", path, "d/%attr:note", "--json")
    assert r.code == 0 and json.loads(r.out)["value"] == "hi", r
    assert trove("stats", path, "d/%attr:extra").code == 0
    # convert to .pt writes them back as attributes; torch.load gives the same objects
    out = str(tmp_path / "back.pt")
    r = trove("convert", path, out)
    assert r.code == 0, r
    got = torch.load(out)
    assert type(got["d"]) is AttrDict and type(got["o"]) is AttrOrderedDict
    assert torch.equal(got["d"]["a"], want["d"]["a"]) and torch.equal(got["d"].extra, want["d"].extra)
    assert got["d"].note == "hi" and torch.equal(got["o"].more["t"], want["o"].more["t"])
    assert torch.equal(got["o"]["b"], want["o"]["b"])
    # The other formats hold entries only: refused by name, unless the attributes are left out.
    for dst in ("a.tdz", "a.safetensors"):
        r = trove("convert", path, str(tmp_path / dst))
        assert r.code == 2 and "'d/%attr:extra'" in r.errtext and "attributes" in r.errtext, r
        assert not os.path.exists(str(tmp_path / dst))
    r = trove("convert", path, str(tmp_path / "e.safetensors"), "--exclude", "**%attr:**")
    assert r.code == 0, r
    # A scan places a dangerous call in the attributes at the same path.
    d.hook = Evil()
    evil = str(tmp_path / "attr-evil.pt")
    torch.save({"d": d}, evil, _use_new_zipfile_serialization=layout == "zip")
    r = trove("scan", evil, "--json")
    calls = [f for f in json.loads(r.out)["files"][0]["findings"] if f.get("call")]
    assert [f["key_path"] for f in calls] == ["d/%attr:hook"] and "posix.system" in calls[0]["call"], calls
    assert not os.path.exists(MARKER)


def test_parts_of_an_object_never_share_a_key_path(trove, tmp_path):
    path = str(tmp_path / "parts.pt")
    torch.save({"obj": Parts()}, path)
    box = torch.load(path)["obj"]
    # The state keeps its names; the first argument, the set item "k" and the first appended
    # item would spell "0", "k" and "0" again and are named with their part instead.
    expected = {"obj/0": box.state["0"], "obj/k": box.state["k"], "obj/%arg:0": box.args[0],
                "obj/%entry:k": box.keyed["k"], "obj/%item:0": box.listed[0]}
    doc, err = info(trove, path)
    keys = [t["key"] for t in doc["tensors"]]
    assert keys == list(expected) and len(set(keys)) == len(keys), keys
    assert "realfiles.Box" in err
    for key, t in expected.items():
        r = trove("cat", path, key, "--raw")
        assert r.code == 0 and r.out == ptfiles.tensor_bytes(t), (key, r)
    out = str(tmp_path / "back.pt")
    r = trove("convert", path, out, "--keep-unknown")
    assert r.code == 0, r
    back = torch.load(out)["obj"]
    assert type(back) is Box and torch.equal(back.args[0], box.args[0]) and torch.equal(back.keyed["k"], box.keyed["k"])
    assert torch.equal(back.listed[0], box.listed[0]) and torch.equal(back.state["0"], box.state["0"])
    assert [t["key"] for t in info(trove, out)[0]["tensors"]] == list(expected)


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_nested_classes_are_written_back_as_the_same_global(trove, tmp_path, layout):
    path = str(tmp_path / "nested.pt")
    torch.save({"x": Outer.Inner()}, path, pickle_protocol=4, _use_new_zipfile_serialization=layout == "zip")
    want = torch.load(path)["x"]
    out = str(tmp_path / "back.pt")
    r = trove("convert", path, out, "--keep-unknown")
    assert r.code == 0, r
    # The output names realfiles / Outer.Inner as the source does (STACK_GLOBAL of protocol 4),
    # not the module 'realfiles.Outer' that does not exist.
    assert ("realfiles", "Outer.Inner") in pickle_globals(data_pkl(out))
    if layout == "zip":
        assert ("realfiles", "Outer.Inner") in pickle_globals(data_pkl(path))
    got = torch.load(out)["x"]
    assert type(got) is Outer.Inner and torch.equal(got.w, want.w)
    # A file without nested names stays protocol 2, as torch.save writes it.
    plain = str(tmp_path / "plain.pt")
    assert trove("convert", files_plain(tmp_path), plain).code == 0
    assert data_pkl(plain)[:2] == b"\x80\x02"


def files_plain(tmp_path):
    path = str(tmp_path / "plain-src.pt")
    torch.save({"w": torch.ones(2)}, path)
    return path


def test_dangerous_dict_subclass_stays_an_object_under_permissive(trove, tmp_path):
    P = pickles
    w = P.tensor_v2(P.storage("FloatStorage", "0", 2), 0, (2,), (1,))
    newobj = P.glob("subprocess", "Popen") + P.EMPTY_TUPLE + b"\x81" + P.MARK + P.s("w") + w + P.SETITEMS
    # protocol 0/1's spelling: copyreg._reconstructor(cls, dict, {...})
    recon = P.call(P.glob("copyreg", "_reconstructor"), P.glob("subprocess", "Popen"), P.glob("builtins", "dict"),
                   P.dict_of([(P.s("w"), w)]))
    body = P.dict_of([(P.s("p"), newobj), (P.s("q"), recon)])
    path = P.torch_zip(str(tmp_path / "popen.pt"), P.pickle_of(body), {"0": struct.pack("<2f", 1, 2)})
    r = trove("info", path)
    assert r.code == 2 and "refused global 'subprocess.Popen'" in r.errtext, r
    doc, err = info(trove, path, "--permissive")
    for key in ("p", "q"):
        assert doc["values"][key]["$object"] == "subprocess.Popen", doc["values"][key]
    assert err.count("\n") == 1 and "subprocess.Popen (2)" in err, err
    # (the reconstructed one is base.__new__(cls, state): its state is its first argument)
    assert [t["key"] for t in doc["tensors"]] == ["p/w", "q/0/w"]
    r = trove("convert", path, str(tmp_path / "o.pt"), "--permissive", "--keep-unknown")
    assert r.code == 2 and "subprocess.Popen" in r.errtext and "dangerous" in r.errtext, r


def test_import_primitives_and_defaultdict_factories(trove, tmp_path):
    # torch._utils._import_dotted_name imports any module: refused by name, class "import".
    path = str(tmp_path / "import.pt")
    torch.save({"w": torch.ones(2), "m": Call(torch._utils._import_dotted_name, ("json",))}, path)
    for cmd in (("info", path), ("convert", path, str(tmp_path / "x.pt"))):
        r = trove(*cmd)
        assert (r.code == 2 and "refused global 'torch._utils._import_dotted_name'" in r.errtext
                and "(import:" in r.errtext), (cmd, r)
    r = trove("scan", path, "--json")
    classes = {g["name"]: g["class"] for g in json.loads(r.out)["files"][0]["globals"]}
    assert classes["torch._utils._import_dotted_name"] == "dangerous" and r.code == 1
    # A defaultdict whose factory is dangerous refuses the file by the factory's name.
    path = str(tmp_path / "dd-danger.pt")
    torch.save({"dd": collections.defaultdict(torch._utils._import_dotted_name, {"w": torch.ones(2)})}, path)
    r = trove("info", path)
    assert r.code == 2 and "refused global 'torch._utils._import_dotted_name'" in r.errtext, r
    # One whose factory trove does not know is an inert object (one warning naming the factory),
    # its tensors listed; convert keeps it only when asked, and torch.load gets it back.
    path = str(tmp_path / "dd-unknown.pt")
    want = collections.defaultdict(zero_tensor, {"w": torch.arange(2.0)})
    torch.save({"dd": want, "plain": collections.defaultdict(list, {"x": torch.ones(1)})}, path)
    doc, err = info(trove, path)
    assert err.count("\n") == 1 and "collections.defaultdict of realfiles.zero_tensor" in err, err
    assert [t["key"] for t in doc["tensors"]] == ["dd/w", "plain/x"]
    assert trove("cat", path, "dd/w", "--raw").out == ptfiles.tensor_bytes(want["w"])
    r = trove("convert", path, str(tmp_path / "o.safetensors"))
    assert r.code == 2 and "'dd'" in r.errtext and "--keep-unknown" in r.errtext, r
    out = str(tmp_path / "kept.pt")
    assert trove("convert", path, out).code == 0
    got = torch.load(out)
    assert type(got["dd"]) is collections.defaultdict and got["dd"].default_factory is zero_tensor
    assert torch.equal(got["dd"]["w"], want["w"]) and got["plain"].default_factory is list
    r = trove("scan", path, "--json")
    classes = {g["name"]: g["class"] for g in json.loads(r.out)["files"][0]["globals"]}
    assert classes["realfiles.zero_tensor"] == "unknown" and classes["builtins.list"] == "data", classes


def trove_convert_dropping(trove, src, tmp_path):
    """src converted to .pt with --drop-unknown; the output's path."""
    out = str(tmp_path / "dropped.pt")
    r = trove("convert", src, out, "--drop-unknown")
    assert r.code == 0, r
    return out
