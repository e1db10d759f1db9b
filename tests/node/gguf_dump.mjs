// What @huggingface/gguf (the independent reader, pinned in package.json) reads from each GGUF file
// named on the command line: one JSON line per file, {"path", "error"} when it refuses the file, else
// its version, byte order, typed metadata (every key in file order: its type id, an array's element
// type id, the value) and tensor infos (name, ne in ggml's order, type id, offset from the data
// section). Numbers that JSON cannot hold exactly are tagged: 64-bit integers {"int": "<decimal>"},
// non-finite floats {"float": "nan"|"inf"|"-inf"}. Used by tests/python/test_gguf_peer.py.
import { gguf } from "@huggingface/gguf";

function plain(v) {
  if (typeof v === "bigint") return { int: v.toString() };
  if (typeof v === "number" && !Number.isFinite(v)) return { float: Number.isNaN(v) ? "nan" : v > 0 ? "inf" : "-inf" };
  if (Array.isArray(v)) return v.map(plain);
  return v;
}

const HEADER_KEYS = new Set(["version", "tensor_count", "kv_count"]);

for (const path of process.argv.slice(2)) {
  let out;
  try {
    const r = await gguf(path, { allowLocalFile: true, typedMetadata: true });
    const metadata = [];
    for (const [key, e] of Object.entries(r.typedMetadata)) {
      if (HEADER_KEYS.has(key)) continue;
      metadata.push({ key, type: e.type, subType: e.subType ?? null, value: plain(e.value) });
    }
    out = {
      path,
      version: r.metadata.version,
      littleEndian: r.littleEndian,
      tensorDataOffset: r.tensorDataOffset.toString(),
      metadata,
      tensors: r.tensorInfos.map((t) => ({ name: t.name, ne: t.shape.map(String), type: t.dtype, offset: t.offset.toString() })),
    };
  } catch (e) {
    out = { path, error: String(e && e.message ? e.message : e) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
