"""Every cast `convert --dtype` does on whole tensors, bit for bit against torch's own `.to()`:
float32 to bfloat16 and float16 over random values, every edge (NaN of any payload, infinities,
subnormals, the largest finite values, halfway cases), and back from every one of the 65,536
bfloat16 and float16 bit patterns."""
import numpy as np
import torch


def edge_float32():
    rng = np.random.default_rng(11)
    bits = [rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)]
    # Every bfloat16 and float16 value, and the float32s on either side of each rounding boundary.
    b16 = np.arange(2 ** 16, dtype=np.uint32) << 16
    bits += [b16, b16 + 0x7FFF, b16 + 0x8000, b16 + 0x8001, b16 - 1]
    halves = torch.from_numpy(np.arange(2 ** 16, dtype=np.uint16).view(np.int16)).view(torch.float16).float()
    h32 = halves.numpy().view(np.uint32)
    bits += [h32, h32 + 1, h32 - 1, h32 + 0x1000, h32 + 0xFFF, h32 + 0x1001]
    bits.append(np.array([0x7F800001, 0xFFC00000, 0x7FFFFFFF, 0x00000001, 0x80000001, 0x7F7FFFFF, 0x477FF000,
                          0x477FEFFF, 0x33800000, 0x33000000, 0x33000001], dtype=np.uint32))
    return torch.from_numpy(np.concatenate(bits).view(np.float32).copy())


def same_bits(a, b):
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_float32_to_bfloat16_and_float16(trove, tmp_path):
    x = edge_float32()
    torch.save({"x": x}, tmp_path / "f32.pt")
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        out = tmp_path / f"{name}.pt"
        r = trove("convert", tmp_path / "f32.pt", out, "--dtype", name)
        assert r.code == 0, r
        got = torch.load(out, weights_only=True)["x"]
        want = x.to(dtype)
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan), name
        assert same_bits(got[~nan], want[~nan]), name


def test_bfloat16_and_float16_to_float32_every_pattern(trove, tmp_path):
    patterns = torch.from_numpy(np.arange(2 ** 16, dtype=np.uint16).view(np.int16).copy())
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        src = tmp_path / f"{name}.pt"
        torch.save({"x": patterns.view(dtype)}, src)
        out = tmp_path / f"{name}-f32.pt"
        assert trove("convert", src, out, "--dtype", "float32").code == 0
        got = torch.load(out, weights_only=True)["x"]
        want = patterns.view(dtype).float()
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan)
        assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32)), name
