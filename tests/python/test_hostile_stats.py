"""Hostile and careless inputs for `trove stats`: views that claim astronomically many elements,
damaged files, absurd options. Each case runs under the suite's bounds (hostile.run_hostile)."""
import json
import zipfile

import torch

from hostile import run_hostile


def test_expanded_view_of_a_trillion_elements_streams_its_one_value(tmp_path):
    path = tmp_path / "expand.pt"
    torch.save({"x": torch.tensor([2.5]).expand(10 ** 6, 10 ** 6), "n": torch.tensor([float("nan")]).expand(3, 10 ** 7)}, path)
    r = run_hostile("trove", "stats", path, "--json", "--hist", "4", watch=tmp_path, expect={0})
    got = {t["key"]: t for t in json.loads(r.out)["tensors"]}
    assert got["x"]["count"] == 10 ** 12 and got["x"]["mean"] == 2.5 and got["x"]["std"] == 0
    assert got["x"]["histogram"]["counts"] == [0, 0, 10 ** 12, 0]
    assert got["n"]["nan"] == 3 * 10 ** 7 and got["n"]["min"] is None


def test_overlapping_view_beyond_the_cap_is_refused_by_name(tmp_path):
    path = tmp_path / "windows.pt"
    base = torch.zeros(2 * 10 ** 6, dtype=torch.uint8)
    torch.save({"w": torch.as_strided(base, (10 ** 6, 10 ** 6), (1, 1))}, path)
    r = run_hostile("trove", "stats", path, watch=tmp_path, expect={2})
    assert "kMaxStatsOverlapElements" in r.errtext and str(path) in r.errtext, r
    assert r.out == b"" or b"\n" in r.out


def test_truncated_checkpoint_is_an_error(tmp_path):
    good = tmp_path / "good.pt"
    torch.save({"w": torch.randn(100000)}, good)
    data = good.read_bytes()
    bad = tmp_path / "cut.pt"
    bad.write_bytes(data[: len(data) // 2])
    r = run_hostile("trove", "stats", bad, watch=tmp_path, expect={2})
    assert "cut.pt" in r.errtext, r


def test_storage_bytes_damaged_inside_the_zip_still_give_figures(tmp_path):
    """Damaged payload bytes are data to stats (verify is what checks CRCs): NaN patterns are counted."""
    src = tmp_path / "src.pt"
    torch.save({"w": torch.zeros(1000)}, src)
    dst = tmp_path / "nan.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/data/0"):
                data = b"\xff" * len(data)  # every float32 a NaN
            zout.writestr(info.filename, data)
    r = run_hostile("trove", "stats", dst, "--check-finite", watch=tmp_path, expect={1})
    assert "1000 NaN" in r.text, r


def test_absurd_options(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(3)}, path)
    run_hostile("trove", "stats", path, "--hist", "1000000000", watch=tmp_path, expect={2})
    run_hostile("trove", "stats", path, "--hist", "0", watch=tmp_path, expect={2})
    run_hostile("trove", "stats", tmp_path / "missing.pt", watch=tmp_path, expect={2})
    run_hostile("trove", "stats", path, "--keys", "nothing*", watch=tmp_path, expect={2})


def test_many_small_tensors(tmp_path):
    path = tmp_path / "many.pt"
    torch.save({f"t{i}": torch.full((3,), float(i)) for i in range(20000)}, path)
    r = run_hostile("trove", "stats", path, "--json", "--threads", "100000", watch=tmp_path, expect={0})
    doc = json.loads(r.out)
    assert doc["summary"]["tensors"] == 20000
    assert doc["tensors"][12345]["mean"] == 12345.0
