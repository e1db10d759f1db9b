// formats/pt/torch_resolver.h: what the names in a torch.save pickle mean, as data.
//
// TorchResolver extends the plain-data resolver with the allowlist of torch names that have a
// known data meaning (the names torch.save writes; docs/security.md, "Three classes of globals"):
// the _rebuild_* functions become TensorView nodes (so do torch.Tensor() + BUILD of its legacy
// (storage, offset, size, stride) state), storage classes and dtypes become global nodes,
// torch.Size a tuple whose type_name is "torch.Size", torch.torch_version.TorchVersion its
// string, torch.device a data object. Persistent ids become storage handles (in legacy files
// also views of a storage, as torch < 0.4 wrote them, and ('module', cls, ...) for a whole
// pickled nn.Module: the class); tensor views are made against them and get their bytes in
// Finish(), once the container has supplied every storage (the legacy format stores them after
// the pickles). Other names follow the policy (trove/unpickler.h). Nothing is ever imported or
// called. One resolver per file, single thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trove/document.h"
#include "trove/unpickler.h"

namespace trove {

// A TensorDict pickled by torch.save (lerobot's stats.pth) is read as a tensordict level: a dict of
// kTensorDictLevel (what tensordict directories give) whose attributes (Value::state) are the rest
// of its pickled state (_batch_size, _device, ...). The .pt writer makes it kPickledTensorDict again.
inline constexpr std::string_view kPickledTensorDict = "tensordict._td.TensorDict";
inline constexpr std::string_view kTensorDictLevel = "tensordict:TensorDict";

// A storage the pickle referenced by persistent id.
struct TorchStorage {
  std::string key;                // persistent-id key ("0", "94367032442640")
  std::optional<DType> dtype;     // nullopt for UntypedStorage (bytes; the tensor says the dtype)
  std::string location;           // "cpu", "cuda:0", ... (recorded, ignored)
  uint64_t declared_bytes = 0;    // numel * element size (typed) or nbytes (untyped)
  SharedBytes bytes;              // supplied by the container
  bool resolved = false;
};

class TorchResolver : public DataResolver {
 public:
  explicit TorchResolver(PicklePolicy policy) : DataResolver(policy) {}

  Value* Global(const std::string& module, const std::string& name, bool& allowed, ValueArena& arena) override;
  Value* Call(Value* callable, Value* args, ValueArena& arena) override;
  Value* NewObject(Value* cls, Value* args, ValueArena& arena) override;
  Value* Build(Value* object, Value* state, ValueArena& arena) override;
  Value* PersistentLoad(Value* pid, ValueArena& arena) override;

  std::vector<TorchStorage>& storages() { return storages_; }
  // Makes every storage the pickle holds by itself (not inside a rebuild call) a tensor node: a
  // 1-D view of all its elements, marked bare_storage. Before the tensors are collected.
  void StoragesAsTensors(ValueArena& arena);
  // Gives every tensor view its storage bytes and validates it; `key_of` names a view for errors.
  void Finish(const std::function<std::string(const TensorView*)>& key_of);
  bool legacy_persistent_ids = false;  // the legacy format adds a 6th element (view metadata)
  // Where this pickle's storages are, for views' storage_key ("data/", or "constants/" for a
  // TorchScript archive's constants), and the first storage_index its views take: two pickles of
  // one document (data.pkl and constants.pkl) number their storages apart.
  std::string storage_folder = "data/";
  int64_t storage_index_base = 0;
  ByteOrder byte_order = ByteOrder::kLittle;  // of every storage (the zip's `byteorder` record)
  // The enum classes whose members this pickle may spell as getattr(EnumClass, 'NAME') (Python
  // >= 3.11), as the format reading it names them (a DeepSpeed optimizer state's ZeroStageEnum);
  // empty: getattr refused as always.
  std::function<bool(const std::string& enum_class, const std::string& member)> enum_members;
  // The classes ("module.Class") the format reading this pickle knows as data beyond torch's
  // tensors (a ShardedTensor's shards and metadata, formats/fsdp): allowed under every policy,
  // made as objects holding their arguments and BUILD state (Value::args, Value::state), never
  // called. A tensor wrapper subclass of one of them (_rebuild_from_type_v2 around
  // _rebuild_wrapper_subclass) becomes an object of that class holding the wrapper's arguments
  // and its state. Empty: none.
  std::function<bool(const std::string& dotted)> data_classes;

 protected:
  bool ReadsEnumMembers() const override { return static_cast<bool>(enum_members); }
  bool EnumMember(const std::string& enum_class, const std::string& member) const override {
    return enum_members && enum_members(enum_class, member);
  }

 private:
  bool IsDataClass(const std::string& dotted) const;
  static Value* DataClassObject(Value* cls, Value* args, bool new_object, ValueArena& arena);
  static std::shared_ptr<const Quantizer> ReadQuantizer(const Value& params, const TensorView& tensor);
  Value* MakeTensor(Value* storage, Value* offset, Value* size, Value* stride, std::optional<DType> dtype,
                    ValueArena& arena, const char* fn);
  // What a storage handle refers to: a storage, or (legacy files of torch < 0.4) a window of one,
  // in elements.
  struct StorageRef {
    size_t storage;
    int64_t offset = 0;
    int64_t numel = -1;  // -1: the whole storage
  };
  std::vector<TorchStorage> storages_;
  std::vector<StorageRef> refs_;
  std::vector<Value*> handles_;  // every storage handle PersistentLoad made (StoragesAsTensors)
  std::map<std::string, size_t> storage_by_key_;
  std::map<std::string, size_t> view_by_key_;  // legacy storage views: view key -> refs_ index
  std::vector<TensorView*> views_;  // every view made, to receive its bytes in Finish()
  // Quantized tensors and their quantizer_params, read into a Quantizer once views have bytes.
  std::vector<std::pair<TensorView*, const Value*>> quantized_;
};

}  // namespace trove
