"""FSDP / verl per-rank checkpoints for test_fsdp.py, in a process of their own:
`python3 fsdp_writer.py KIND OUT_DIR [PATTERN]`.

`sharded`: torch 1.13's real ShardedTensors over 2 gloo ranks (ChunkShardingSpec along dim 0, 1
and 2, odd sizes) beside a plain tensor every rank holds and an int, each rank's state dict saved
with plain torch.save as PATTERN (`{r}` the rank; FSDP's LOCAL/SHARDED_STATE_DICT files).
`evil`: the same, with rank 1's file holding an object whose pickle calls os.system.

`dtensor` and its variants: torch 1.13 has no DTensor, so these are its pickles made here, as
torch >= 2 writes them (Tensor.__reduce_ex__ of a wrapper subclass: _rebuild_from_type_v2 around
_rebuild_wrapper_subclass, with the DTensor's _local_tensor and _spec as its state), the classes
stood in by ones registered under DTensor's own module paths (`torch.distributed.tensor._api`,
`..._dtensor_spec`, `...placement_types`, `torch.distributed.device_mesh`; with `old` in the
variant, torch 2.0-2.4's `torch.distributed._tensor.*`). 3 ranks on a 1-D mesh, as verl's
`model_world_size_3_rank_{r}.pt`: Shard(0) and Shard(1) with odd sizes (the last rank's share
shorter or empty), a Replicate, a plain tensor. Variants: `dtensor-slots` (the state as torch 2.5+
with __slots__ writes it: (None, {...})), `dtensor-differ` (the plain tensor differs on rank 1),
`dtensor-differ-replicate`, `dtensor-huge` (a declared global size of 2^40 over small local
tensors), `dtensor-dtype` (rank 1 says float64), `dtensor-strided` (a _StridedShard placement).

Every kind writes OUT_DIR/../NAME.expected.pt: torch.save of the global tensors, by name.
"""

import dataclasses
import os
import sys
import types
import typing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dcp_writer  # noqa: E402,F401  (torch 1.13's dataclasses on Python 3.11: its workaround)

import torch  # noqa: E402

WORLD = 2


def full_sharded():
    return {
        "rows": torch.arange(7 * 5, dtype=torch.float32).reshape(7, 5),
        "cols": torch.arange(3 * 9, dtype=torch.float64).reshape(3, 9) / 7,
        "cube": torch.arange(3 * 4 * 5, dtype=torch.int32).reshape(3, 4, 5),
        "replicated": torch.arange(4, dtype=torch.int16),
    }


class RunsACommand:
    """An object whose pickle calls os.system: what a hostile rank file holds."""

    def __reduce__(self):
        return (os.system, ("true",))


def rank_main(rank, out, pattern, store, evil):
    import torch.distributed as dist
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=WORLD)
    full = full_sharded()
    state = {}
    for name, dim in (("rows", 0), ("cols", 1), ("cube", 2)):
        spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(WORLD)])
        t = full[name]
        st = sharded_tensor.empty(spec, *t.shape, dtype=t.dtype)
        for shard in st.local_shards():
            o, s = shard.metadata.shard_offsets, shard.metadata.shard_sizes
            shard.tensor.copy_(t[tuple(slice(a, a + b) for a, b in zip(o, s))])
        state[name] = st
    state["replicated"] = full["replicated"].clone()
    state["step"] = 7
    if evil and rank == 1:
        state["evil"] = RunsACommand()
    torch.save(state, os.path.join(out, pattern.format(r=rank)))
    dist.barrier()
    dist.destroy_process_group()


# DTensor's pickle, as torch >= 2 writes it.

def register(module, **classes):
    m = sys.modules.get(module) or types.ModuleType(module)
    for name, cls in classes.items():
        cls.__module__ = module
        cls.__qualname__ = name
        cls.__name__ = name
        setattr(m, name, cls)
    sys.modules[module] = m


@dataclasses.dataclass(frozen=True)
class Shard:
    dim: int


@dataclasses.dataclass(frozen=True)
class Replicate:
    pass


@dataclasses.dataclass(frozen=True)
class _StridedShard:
    dim: int
    split_factor: int


class TensorMeta(typing.NamedTuple):
    shape: torch.Size
    stride: tuple
    dtype: torch.dtype


@dataclasses.dataclass
class DTensorSpec:
    mesh: object
    placements: tuple
    tensor_meta: object = None


class DeviceMesh:
    def __init__(self, world):
        self.device_type = "cpu"
        self.mesh = torch.arange(world, dtype=torch.int64)
        self.mesh_dim_names = None


class DTensor:
    slots = False

    def __init__(self, local, spec):
        self._local_tensor = local
        self._spec = spec

    def __reduce_ex__(self, proto):
        meta = self._spec.tensor_meta
        args = (DTensor, meta.dtype, tuple(meta.shape), meta.stride, 0, torch.strided, torch.device("cpu"), False)
        state = {"_local_tensor": self._local_tensor, "_spec": self._spec}
        if DTensor.slots:
            state = (None, state)
        return (torch._tensor._rebuild_from_type_v2, (torch._utils._rebuild_wrapper_subclass, DTensor, args, state))


def register_dtensor(old):
    if old:
        register("torch.distributed._tensor.api", DTensor=DTensor)
        register("torch.distributed._tensor.placement_types", Shard=Shard, Replicate=Replicate,
                 _StridedShard=_StridedShard, DTensorSpec=DTensorSpec, TensorMeta=TensorMeta)
        register("torch.distributed._tensor.device_mesh", DeviceMesh=DeviceMesh)
    else:
        register("torch.distributed.tensor._api", DTensor=DTensor)
        register("torch.distributed.tensor._dtensor_spec", DTensorSpec=DTensorSpec, TensorMeta=TensorMeta)
        register("torch.distributed.tensor.placement_types", Shard=Shard, Replicate=Replicate,
                 _StridedShard=_StridedShard)
        register("torch.distributed.device_mesh", DeviceMesh=DeviceMesh)


def contiguous_strides(shape):
    strides, step = [], 1
    for s in reversed(shape):
        strides.insert(0, step)
        step *= s
    return strides


def chunk(extent, n, i):
    size = (extent + n - 1) // n
    start = min(i * size, extent)
    return start, min(size, extent - start)


def full_dtensor():
    return {
        "model.rows": torch.arange(7 * 5, dtype=torch.float32).reshape(7, 5) - 3,
        "model.cols": (torch.arange(3 * 8, dtype=torch.float64).reshape(3, 8) / 3),
        "model.tiny": torch.tensor([1.5, -2.5], dtype=torch.float32).to(torch.bfloat16),
        "model.rep": torch.arange(4, dtype=torch.int64) * 11,
        "model.buffer": torch.tensor([3], dtype=torch.int64),
    }


def write_dtensor(out, variant):
    world = 3
    register_dtensor("old" in variant)
    DTensor.slots = "slots" in variant
    mesh = DeviceMesh(world)
    full = full_dtensor()
    placements = {"model.rows": Shard(0), "model.cols": Shard(1), "model.tiny": Shard(0), "model.rep": Replicate()}
    for r in range(world):
        state = {}
        for name, t in full.items():
            if name not in placements:
                local = t.clone()
                if variant == "dtensor-differ" and r == 1:
                    local += 1
                state[name] = local
                continue
            p = placements[name]
            local = t
            if isinstance(p, Shard):
                start, size = chunk(t.shape[p.dim], world, r)
                local = t.narrow(p.dim, start, size)
            local = local.clone()
            shape = t.shape
            dtype = t.dtype
            pl = (p,)
            if variant == "dtensor-differ-replicate" and name == "model.rep" and r == 2:
                local[0] = -1
            if variant == "dtensor-huge" and name == "model.rows":
                shape = torch.Size([1 << 40, 5])
            if variant == "dtensor-dtype" and name == "model.cols" and r == 1:
                local = local.to(torch.float32)
                dtype = torch.float32
            if variant == "dtensor-strided" and name == "model.rows":
                pl = (_StridedShard(0, 2),)
            stride = tuple(contiguous_strides(shape))
            state[name] = DTensor(local, DTensorSpec(mesh, pl, TensorMeta(torch.Size(shape), stride, dtype)))
        state["step"] = 12
        torch.save(state, os.path.join(out, f"model_world_size_{world}_rank_{r}.pt"))
    return full


def main():
    kind, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    expected = out.rstrip("/") + ".expected.pt"
    if kind in ("sharded", "evil"):
        import torch.multiprocessing as mp
        pattern = sys.argv[3] if len(sys.argv) > 3 else "model_rank{r}.pt"
        store = out.rstrip("/") + ".store"
        mp.spawn(rank_main, args=(out, pattern, store, kind == "evil"), nprocs=WORLD, join=True)
        torch.save(full_sharded(), expected)
    elif kind.startswith("dtensor"):
        torch.save(write_dtensor(out, kind), expected)
    else:
        raise SystemExit("unknown kind " + kind)


if __name__ == "__main__":
    main()
