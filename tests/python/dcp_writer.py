"""DCP checkpoints for test_dcp.py, made by torch 1.13's own writer (save_state_dict with a
FileSystemWriter), in a process of their own: `python3 dcp_writer.py KIND OUT_DIR`.

KIND is `plain` (one process: tensors of several dtypes and odd shapes, objects), `sharded`
(ShardedTensors over 2 gloo ranks, split along dim 0 and along dim 1), `big` (four 16 MiB
ShardedTensors over 2 ranks, for memory), `evil_object` (an object item whose pickle calls
os.system) or `edit ACTION` (rewrite
the metadata of the checkpoint in OUT_DIR with pickle itself: `hole` drops a chunk, `overlap`
repeats one, `many` declares millions of chunks, `huge` a tensor far larger than its archives). Every kind but `edit` also writes
OUT_DIR/../NAME.expected.pt: torch.save of the global tensors it saved, by name. `plain-per-rank`
and `sharded-per-rank` write one file per rank (single_file_per_rank=True: the items back to back
at their offsets) instead of one per item.

torch 1.13's dataclasses use a dataclass instance as a field default, which Python 3.11 refuses
(it is unhashable): before importing them, such defaults' classes are given identity hashing.
"""

import dataclasses
import os
import pickle
import sys

_get_field = dataclasses._get_field


def _get_field_allowing_instance_defaults(cls, a_name, a_type, *rest):
    default = cls.__dict__.get(a_name, dataclasses.MISSING)
    if isinstance(default, dataclasses.Field):
        default = default.default
    if dataclasses.is_dataclass(default) and not isinstance(default, type) and type(default).__hash__ is None:
        type(default).__hash__ = object.__hash__
    return _get_field(cls, a_name, a_type, *rest)


dataclasses._get_field = _get_field_allowing_instance_defaults

import torch  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402

WORLD = 2


def plain_state():
    g = torch.Generator().manual_seed(5)
    return {
        "model.weight": torch.randn(3, 4, generator=g),
        "model.bias": torch.randn(5, generator=g).to(torch.bfloat16),
        "model.ids": torch.arange(24, dtype=torch.int64).reshape(2, 3, 4),
        "model.half": torch.randn(7, 1, 3, generator=g).to(torch.float16),
        "model.mask": torch.tensor([True, False, True, True, False]),
        "model.scalar": torch.tensor(2.5, dtype=torch.float64),
        "model.empty": torch.zeros(0, 3, dtype=torch.uint8),
        "model.transposed": torch.arange(12, dtype=torch.int32).reshape(3, 4).t(),
        "step": 7,
        "config": {"lr": 0.1, "betas": (0.9, 0.999), "name": "adam"},
    }


def full_sharded():
    return {
        "rows": torch.arange(7 * 5, dtype=torch.float32).reshape(7, 5),
        "cols": (torch.arange(3 * 9, dtype=torch.float64).reshape(3, 9) / 7),
        "replicated": torch.arange(4, dtype=torch.int16),
    }


class RunsACommand:
    """An object whose pickle calls os.system: what a hostile object item holds."""

    def __reduce__(self):
        return (os.system, ("true",))


def full_big():
    """Four 16 MiB float32 tensors, each split over the ranks (rows, columns, rows, columns)."""
    return {f"w{i}": torch.full((2048, 2048), float(i + 1)) + torch.arange(2048.0) for i in range(4)}


def big_rank_main(rank, out, store):
    import torch.distributed as dist
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=WORLD)
    state = {}
    for i, (name, t) in enumerate(full_big().items()):
        spec = ChunkShardingSpec(dim=i % 2, placements=[f"rank:{r}/cpu" for r in range(WORLD)])
        st = sharded_tensor.empty(spec, *t.shape, dtype=t.dtype)
        for shard in st.local_shards():
            o, s = shard.metadata.shard_offsets, shard.metadata.shard_sizes
            shard.tensor.copy_(t[tuple(slice(a, a + b) for a, b in zip(o, s))])
        state[name] = st
    dcp.save_state_dict(state, dcp.FileSystemWriter(out))
    dist.barrier()
    dist.destroy_process_group()


def rank_main(rank, out, store, per_rank=False):
    import torch.distributed as dist
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=WORLD)
    full = full_sharded()
    state = {}
    for name, dim in (("rows", 0), ("cols", 1)):
        spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(WORLD)])
        t = full[name]
        st = sharded_tensor.empty(spec, *t.shape, dtype=t.dtype)
        for shard in st.local_shards():
            o, s = shard.metadata.shard_offsets, shard.metadata.shard_sizes
            shard.tensor.copy_(t[tuple(slice(a, a + b) for a, b in zip(o, s))])
        state[name] = st
    state["replicated"] = full["replicated"]
    dcp.save_state_dict(state, dcp.FileSystemWriter(out, single_file_per_rank=per_rank))
    dist.barrier()
    dist.destroy_process_group()


def edit(out, action):
    with open(os.path.join(out, ".metadata"), "rb") as f:
        meta = pickle.load(f)  # our own file, written just before
    fqn, item = next((k, v) for k, v in meta.state_dict_metadata.items() if len(getattr(v, "chunks", [])) > 1)
    chunks = item.chunks
    if action == "hole":  # the last chunk and its storage gone
        gone = chunks.pop()
        for key in [k for k in meta.storage_data if k.fqn == fqn and k.offset == gone.offsets]:
            del meta.storage_data[key]
    elif action == "overlap":  # the first chunk one row longer: into the second's rows
        chunks[0].sizes = torch.Size([s + (1 if d == 0 else 0) for d, s in enumerate(chunks[0].sizes)])
    elif action == "huge":  # a tensor of 2^41 rows whose two chunks point at the same small archives
        half = 1 << 40
        item.size = torch.Size([2 * half] + list(item.size[1:]))
        first, second = chunks[0], chunks[1]
        old = second.offsets
        first.sizes = torch.Size([half] + list(first.sizes[1:]))
        second.offsets = torch.Size([half] + [0] * (len(old) - 1))
        second.sizes = first.sizes
        for key in [k for k in meta.storage_data if k.fqn == fqn and k.offset == old]:
            info = meta.storage_data.pop(key)
            object.__setattr__(key, "offset", second.offsets)  # a frozen dataclass
            meta.storage_data[key] = info
    elif action == "many":  # millions of chunks in a few megabytes (one chunk, memo-shared)
        chunks[:] = [chunks[0]] * 5_000_000
    with open(os.path.join(out, ".metadata"), "wb") as f:
        pickle.dump(meta, f)


def main():
    kind = sys.argv[1]
    if kind == "edit":
        edit(sys.argv[3], sys.argv[2])
        return
    out = sys.argv[2]
    expected = out.rstrip("/") + ".expected.pt"
    per_rank = kind.endswith("-per-rank")
    kind = kind.removesuffix("-per-rank")
    if kind == "plain":
        state = plain_state()
        dcp.save_state_dict(state, dcp.FileSystemWriter(out, single_file_per_rank=per_rank), no_dist=True)
        torch.save({k: v for k, v in state.items() if isinstance(v, torch.Tensor)}, expected)
    elif kind == "sharded":
        import torch.multiprocessing as mp
        store = out.rstrip("/") + ".store"
        mp.spawn(rank_main, args=(out, store, per_rank), nprocs=WORLD, join=True)
        torch.save(full_sharded(), expected)
    elif kind == "evil_object":
        state = {"w": torch.ones(3), "evil": RunsACommand()}
        dcp.save_state_dict(state, dcp.FileSystemWriter(out), no_dist=True)
        torch.save({"w": state["w"]}, expected)
    elif kind == "big":
        import torch.multiprocessing as mp
        mp.spawn(big_rank_main, args=(out, out.rstrip("/") + ".store"), nprocs=WORLD, join=True)
        torch.save(full_big(), expected)
    else:
        raise SystemExit("unknown kind " + kind)


if __name__ == "__main__":
    main()
