// The .psk.d reader of trove's model: leaves as strided views into the mapping.
#include "formats/pskd/pskd_reader.h"

#include <cstring>

#include "trove/pskd.h"

namespace trove {
namespace {

using pskd::Leaf;
using pskd::PskdFile;
using pskd::SampleType;

// Leaf k across all samples, as [count, dims...].
TensorView LeafView(const PskdFile& file, const Leaf& leaf, size_t k) {
  const pskd::Header& h = file.header();
  const SampleType& type = h.type;
  TensorView view;
  view.dtype = leaf.dtype();
  view.shape.push_back(static_cast<int64_t>(h.count));
  for (int64_t d : leaf.shape()) view.shape.push_back(d);
  view.strides = ContiguousStrides(view.shape);  // the first is set below: samples may interleave
  view.storage_index = static_cast<int64_t>(k);
  view.storage_key = "data/" + std::to_string(k);
  const uint64_t data_bytes = h.count * type.sample_bytes;  // checked against the file by ParseHeader
  if (type.sample_bytes % leaf.element_bytes == 0) {
    view.strides[0] = static_cast<int64_t>(type.sample_bytes / leaf.element_bytes);
    view.storage = h.count == 0 ? file.bytes().Slice(h.data_offset, 0)
                                : file.bytes().Slice(h.data_offset + leaf.offset, data_bytes - leaf.offset);
    // Beside other leaves, the bytes under the view are mostly theirs: it is no storage of its
    // own (index -1), so that writers store its elements, not the other leaves' bytes between
    // them, and info counts its bytes, not the whole sample records.
    if (leaf.bytes != type.sample_bytes) view.storage_index = -1;
  } else {
    // Misaligned interleaving cannot be expressed in element strides: gather the leaf.
    view.strides[0] = static_cast<int64_t>(leaf.elements);
    std::vector<uint8_t> gathered(h.count * leaf.bytes);
    for (uint64_t i = 0; i < h.count; ++i) {
      std::memcpy(gathered.data() + i * leaf.bytes, file.Sample(i).data() + leaf.offset, leaf.bytes);
    }
    view.storage = SharedBytes::FromVector(std::move(gathered));
    view.storage_key = "gathered/" + std::to_string(k);
  }
  view.Validate();
  return view;
}

Value* BuildNode(const PskdFile& file, uint32_t node, ValueArena& arena) {
  const SampleType& type = file.type();
  const pskd::TypeNode& n = type.nodes[node];
  if (!n.is_tuple) return arena.Tensor(LeafView(file, type.leaves[n.leaf], n.leaf));
  Value* dict = arena.Dict();  // a plain dict of "0", "1", ...: what every writer takes
  for (size_t i = 0; i < n.children.size(); ++i) {
    dict->entries.emplace_back(arena.Str(std::to_string(i)), BuildNode(file, n.children[i], arena));
  }
  return dict;
}

}  // namespace

Document ReadPskd(std::shared_ptr<MappedFile> file, const ReadOptions& /*options*/) {
  const uint64_t file_size = file->size();
  PskdFile pskd = PskdFile::FromMapped(std::move(file));
  pskd.RequireLayout();
  const SampleType& type = pskd.type();
  Document doc;
  doc.format = "pskd";
  doc.path = pskd.name();
  doc.file_size = file_size;
  Value* root = doc.arena->Dict();
  const pskd::TypeNode& top = type.nodes[0];
  if (top.is_tuple) {
    for (size_t i = 0; i < top.children.size(); ++i) {
      root->entries.emplace_back(doc.arena->Str(std::to_string(i)), BuildNode(pskd, top.children[i], *doc.arena));
    }
  } else {
    root->entries.emplace_back(doc.arena->Str("0"), BuildNode(pskd, 0, *doc.arena));
  }
  doc.root = root;
  doc.tensors = CollectTensors(root);
  std::string encodings;
  for (size_t k = 0; k < type.leaves.size(); ++k) {
    if (k > 0) encodings += ", ";
    encodings += pskd::LeafStorageName(type.leaves[k]);
  }
  doc.properties = {{"type", type.text},
                    {"count", PropertyValue::Integer(static_cast<int64_t>(pskd.count()))},
                    {"version", PropertyValue::Integer(pskd.header().version)},
                    {"encodings", encodings}};
  ContainerRecord header;
  header.name = "header";
  header.size = header.stored_size = pskd.header().data_offset;
  header.method = "stored";
  ContainerRecord data;
  data.name = "samples";
  data.offset = pskd.header().data_offset;
  data.size = data.stored_size = pskd.count() * type.sample_bytes;
  data.method = "stored";
  doc.records = {header, data};
  return doc;
}

}  // namespace trove
