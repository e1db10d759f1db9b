#include "formats/pt/torch_resolver.h"

#include <string_view>

#include "trove/error.h"

namespace trove {
namespace {

// Storage handles are object nodes with this type name (no Python name can contain '<'),
// and `integer` = index into storages_.
constexpr std::string_view kStorageHandle = "<storage>";

constexpr std::string_view kRebuildFromType = "torch._tensor._rebuild_from_type_v2";
// torch.__version__: a str subclass Lightning and others save in hyperparameters.
constexpr std::string_view kTorchVersion = "torch.torch_version.TorchVersion";
// torch.Tensor() then BUILD with (storage, offset, size, stride): how tensors pickled before
// _rebuild_tensor_v2 (and Variables, with a 5-tuple holding the tensor) are spelled.
constexpr std::string_view kLegacyTensor = "torch.Tensor";
// torch writes _rebuild_from_type_v2 once around a tensor subclass's own rebuild call; a few
// layers leave room for wrappers of wrappers. Longer chains come only from crafted files, and
// each REDUCE of a memo-shared chain would otherwise walk it again.
constexpr size_t kMaxRebuildFromTypeNesting = 8;

bool Starts(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

[[noreturn]] void Bad(const std::string& fn, const std::string& what) {
  Fail(ErrorCode::kCorrupt, fn + ": " + what);
}

int64_t IntArg(const Value* v, const std::string& fn, const char* what) {
  if (v == nullptr || v->kind != ValueKind::kInt || v->is_big_int()) Bad(fn, std::string(what) + " is not a 64-bit int");
  return v->integer;
}

std::vector<int64_t> IntTuple(const Value* v, const std::string& fn, const char* what) {
  if (v == nullptr || (v->kind != ValueKind::kTuple && v->kind != ValueKind::kList))
    Bad(fn, std::string(what) + " is not a tuple");
  if (v->items.size() > kMaxTensorRank) {
    Fail(ErrorCode::kLimit, fn + ": " + what + " has " + std::to_string(v->items.size()) +
                                " dimensions, more than kMaxTensorRank (" + std::to_string(kMaxTensorRank) + ")");
  }
  std::vector<int64_t> out;
  out.reserve(v->items.size());
  for (const Value* item : v->items) out.push_back(IntArg(item, fn, what));
  return out;
}

const std::vector<Value*>& Args(const Value* args, const std::string& fn) {
  if (args == nullptr || args->kind != ValueKind::kTuple) Bad(fn, "arguments are not a tuple");
  return args->items;
}

std::optional<DType> DTypeOfGlobal(const Value* v) {
  if (v == nullptr || v->kind != ValueKind::kGlobal || !Starts(v->type_name, "torch.")) return std::nullopt;
  return DTypeFromTorchString(v->type_name);
}

bool IsBool(const Value* v) { return v != nullptr && v->kind == ValueKind::kBool; }

// How an argument is named in an error: a name as itself ('torch.float128'), else its kind.
std::string Spelled(const Value* v) {
  if (v != nullptr && v->kind == ValueKind::kGlobal) return "'" + v->type_name + "'";
  return "(a " + std::string(KindName(v == nullptr ? ValueKind::kNone : v->kind)) + ")";
}

}  // namespace

namespace {

// The node name of a torch name with a data meaning (storage classes of torch.cuda are torch's),
// or nullopt.
std::optional<std::string> TorchDataName(const std::string& module, const std::string& name) {
  const std::string dotted = module + "." + name;
  if (module == "torch._utils") {
    static const char* const kRebuild[] = {
        "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
        "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_sparse_tensor",
        "_rebuild_sparse_csr_tensor", "_rebuild_meta_tensor_no_storage", "_rebuild_wrapper_subclass",
        "_rebuild_device_tensor_from_cpu_tensor", "_rebuild_device_tensor_from_numpy", "_rebuild_nested_tensor",
        "_rebuild_xla_tensor"};
    for (const char* fn : kRebuild)
      if (name == fn) return dotted;
  }
  // TorchScript's pickler (torch.jit.save's data.pkl) wraps containers in these; in torch each
  // returns its argument (torch/jit/_pickle.py): data, not code.
  if (module == "torch.jit._pickle") {
    for (const char* fn : {"restore_type_tag", "build_intlist", "build_tensorlist", "build_doublelist", "build_boollist"})
      if (name == fn) return dotted;
  }
  if (dotted == kRebuildFromType || dotted == kTorchVersion || dotted == "torch.Size" || dotted == "torch.device" ||
      dotted == kLegacyTensor || dotted == "torch.nn.parameter.Parameter" ||
      dotted == "torch.serialization._get_layout" || dotted == "torch.storage.UntypedStorage" ||
      dotted == "torch.storage.TypedStorage") {
    return dotted;
  }
  if (module == "torch" || module == "torch.cuda") {
    if (name.size() > 7 && name.ends_with("Storage") && DTypeFromStorageClass(name)) return "torch." + name;
    if (DTypeFromName(name) && DTypeFromTorchString("torch." + name)) return dotted;
    static const char* const kOtherNames[] = {
        "per_tensor_affine", "per_tensor_symmetric", "per_channel_affine", "per_channel_symmetric",
        "per_channel_affine_float_qparams", "int1", "int2", "int3", "int4", "int5", "int6", "int7", "uint1", "uint2",
        "uint3", "uint4", "uint5", "uint6", "uint7", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr",
        "sparse_bsc", "strided"};
    for (const char* n : kOtherNames)
      if (name == n) return dotted;
    // Legacy tensor classes (torch.FloatTensor, torch.cuda.HalfTensor): names only.
    if (name.ends_with("Tensor") && name.size() > 6 && name != "Tensor") {
      std::string stem = name.substr(0, name.size() - 6);
      if (DTypeFromStorageClass(stem + "Storage")) return dotted;
    }
  }
  return std::nullopt;
}

bool IsTorchDataName(const Value* v) {
  if (v == nullptr || v->kind != ValueKind::kGlobal) return false;
  const size_t dot = v->type_name.rfind('.');
  return dot != std::string::npos && TorchDataName(v->type_name.substr(0, dot), v->type_name.substr(dot + 1));
}

// A quantizer's parameter of the wrong kind: "<what><is_not>", out of line (cold, never inlined):
// where the text's length is a constant, GCC 12 warns of a false overflow (-Warray-bounds) in the
// inlined std::string copy.
[[noreturn, gnu::cold, gnu::noinline]] void FailQuantizerParameter(const char* what, const char* is_not) {
  Fail(ErrorCode::kCorrupt, std::string(what) + is_not);
}

}  // namespace

Value* TorchResolver::Global(const std::string& module, const std::string& name, bool& allowed, ValueArena& arena) {
  if (std::optional<std::string> node = TorchDataName(module, name)) {
    allowed = true;
    return arena.Global(std::move(*node));
  }
  if (IsDataClass(module + "." + name)) {
    allowed = true;
    return arena.Global(module + "." + name);
  }
  return DataResolver::Global(module, name, allowed, arena);
}

bool TorchResolver::IsDataClass(const std::string& dotted) const { return data_classes && data_classes(dotted); }

Value* TorchResolver::DataClassObject(Value* cls, Value* args, bool new_object, ValueArena& arena) {
  Value* v = arena.Object(cls->type_name, args);
  v->new_object = new_object;
  v->module_size = cls->module_size;
  return v;
}

Value* TorchResolver::NewObject(Value* cls, Value* args, ValueArena& arena) {
  if (cls->kind == ValueKind::kGlobal && IsDataClass(cls->type_name)) return DataClassObject(cls, args, true, arena);
  // cls.__new__ of torch's data classes is what calling them makes (TorchVersion's string).
  if (IsTorchDataName(cls)) return Call(cls, args, arena);
  return DataResolver::NewObject(cls, args, arena);
}

Value* TorchResolver::PersistentLoad(Value* pid, ValueArena& arena) {
  const std::string fn = "persistent id";
  if (pid != nullptr && pid->kind == ValueKind::kStr) {
    // Protocol 0's PERSID is a line of text: torch.save(pickle_protocol=0) writes its tuples'
    // repr there, which torch.load cannot read back either.
    Bad(fn, "is a line of text ('" + pid->text.substr(0, 60) + (pid->text.size() > 60 ? "...'" : "'") +
                "), as torch.save with pickle protocol 0 writes storages: torch.load cannot read it either");
  }
  if (pid == nullptr || pid->kind != ValueKind::kTuple) Bad(fn, "is not a tuple");
  const auto& t = pid->items;
  auto text_is = [](const Value* v, std::string_view s) {
    return (v->kind == ValueKind::kStr || v->kind == ValueKind::kBytes) && v->text == s;
  };
  if (!t.empty() && text_is(t[0], "module")) {
    // ('module', cls, source file, source): a whole nn.Module pickled by the legacy format; torch
    // checks the source against the installed class and gives the class. So does trove (the
    // source is kept nowhere: it is text, never run).
    if (!legacy_persistent_ids) Bad(fn, "'module' appears only in legacy (non-zip) files");
    if (t.size() != 4 || t[1]->kind != ValueKind::kGlobal) Bad(fn, "'module' is not (module, class, file, source)");
    return t[1];
  }
  if (t.empty() || !text_is(t[0], "storage")) Bad(fn, "first element is not 'storage'");
  const size_t expected = legacy_persistent_ids ? 6 : 5;
  if (t.size() != expected) {
    Bad(fn, "has " + std::to_string(t.size()) + " elements, expected " + std::to_string(expected));
  }
  const Value* cls = t[1];
  if (cls->kind != ValueKind::kGlobal) Bad(fn, "storage class is not a name");
  std::optional<DType> dtype;
  bool untyped = cls->type_name == "torch.storage.UntypedStorage";
  if (!untyped) {
    std::string_view n = cls->type_name;
    size_t dot = n.rfind('.');
    dtype = DTypeFromStorageClass(n.substr(dot + 1));
    if (!dtype) Fail(ErrorCode::kRefused, "unknown storage class '" + cls->type_name + "'");
  }
  auto plain_key = [&](const Value* v, const char* what) -> const std::string& {
    if (v->kind != ValueKind::kStr) Bad(fn, std::string(what) + " is not a string");
    const std::string& key = v->text;
    if (key.empty() || key.find('/') != std::string::npos || key.find('\\') != std::string::npos || key == "." ||
        key == ".." || key.find('\0') != std::string::npos) {
      Fail(ErrorCode::kRefused, std::string(what) + " '" + key + "' is not a plain record name");
    }
    return key;
  };
  const std::string& key = plain_key(t[2], "storage key");
  std::string location = t[3]->kind == ValueKind::kStr ? t[3]->text : "";
  int64_t numel = IntArg(t[4], fn, "storage size");
  if (numel < 0) Bad(fn, "negative storage size");
  uint64_t esize = dtype ? ElementSize(*dtype) : 1;
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), esize, &nbytes)) Bad(fn, "storage size overflows");
  size_t index;
  auto it = storage_by_key_.find(key);
  if (it != storage_by_key_.end()) {
    index = it->second;
    const TorchStorage& s = storages_[index];
    if (s.dtype != dtype || s.declared_bytes != nbytes) {
      Fail(ErrorCode::kRefused, "storage '" + key + "' is referenced with two different types or sizes");
    }
  } else {
    index = storages_.size();
    storages_.push_back(TorchStorage{key, dtype, location, nbytes, {}, false});
    storage_by_key_.emplace(key, index);
  }
  StorageRef ref{index, 0, -1};
  if (legacy_persistent_ids && t[5]->kind != ValueKind::kNone) {
    // torch < 0.4: (view key, offset, size) in elements, a window of the root storage that
    // tensors are made against (torch: storage[offset:offset + size]).
    const Value* view = t[5];
    if (view->kind != ValueKind::kTuple || view->items.size() != 3) Bad(fn, "storage view is not (key, offset, size)");
    const std::string& view_key = plain_key(view->items[0], "storage view key");
    const int64_t offset = IntArg(view->items[1], fn, "storage view offset");
    const int64_t size = IntArg(view->items[2], fn, "storage view size");
    if (offset < 0 || size < 0 || offset > numel || size > numel - offset) {
      Bad(fn, "storage view [" + std::to_string(offset) + ", +" + std::to_string(size) + ") lies outside storage '" + key +
                  "' of " + std::to_string(numel) + " elements");
    }
    ref = StorageRef{index, offset, size};
    auto [at, fresh] = view_by_key_.emplace(view_key, refs_.size());
    if (!fresh) {
      const StorageRef& known = refs_[at->second];
      if (known.storage != index || known.offset != offset || known.numel != size) {
        Fail(ErrorCode::kRefused, "storage view '" + view_key + "' is referenced as two different windows");
      }
    }
  }
  refs_.push_back(ref);
  Value* handle = arena.Object(std::string(kStorageHandle), pid);
  handle->integer = static_cast<int64_t>(refs_.size() - 1);
  handles_.push_back(handle);
  return handle;
}

Value* TorchResolver::MakeTensor(Value* storage, Value* offset, Value* size, Value* stride, std::optional<DType> dtype,
                                 ValueArena& arena, const char* fn_name) {
  const std::string fn = fn_name;
  if (storage == nullptr || storage->kind != ValueKind::kObject || storage->type_name != kStorageHandle)
    Bad(fn, "first argument is not a storage");
  const StorageRef& ref = refs_[static_cast<size_t>(storage->integer)];
  const TorchStorage& s = storages_[ref.storage];
  if (!dtype) dtype = s.dtype;
  if (!dtype) Bad(fn, "untyped storage without a dtype");
  if (s.dtype && *s.dtype != *dtype) Bad(fn, "storage type differs from the tensor's dtype");
  TensorView view;
  view.dtype = *dtype;
  view.storage_offset = IntArg(offset, fn, "storage offset");
  view.shape = IntTuple(size, fn, "size");
  view.strides = IntTuple(stride, fn, "stride");
  if (ref.numel >= 0) {
    // A view of a storage window: its elements must lie in the window, and it is a view of the
    // root storage `ref.offset` elements further on.
    int64_t last = view.storage_offset;
    bool empty = false;
    for (size_t i = 0; i < view.shape.size(); ++i) {
      if (view.shape[i] == 0) empty = true;
      int64_t span = 0;
      if (view.shape[i] > 0 && (__builtin_mul_overflow(view.shape[i] - 1, view.strides[i], &span) ||
                                __builtin_add_overflow(last, span, &last))) {
        Bad(fn, "view extent overflows");
      }
    }
    if (view.storage_offset < 0 || (!empty && last >= ref.numel)) {
      Bad(fn, "tensor reaches past its storage view (" + std::to_string(ref.numel) + " elements)");
    }
    if (__builtin_add_overflow(view.storage_offset, ref.offset, &view.storage_offset)) Bad(fn, "storage offset overflows");
  }
  view.storage_index = storage_index_base + static_cast<int64_t>(ref.storage);
  view.storage_key = storage_folder + s.key;
  Value* node = arena.Tensor(std::move(view));
  views_.push_back(node->tensor);
  return node;
}

Value* TorchResolver::Call(Value* callable, Value* args, ValueArena& arena) {
  if (callable == nullptr || callable->kind != ValueKind::kGlobal) return DataResolver::Call(callable, args, arena);
  const std::string& fn = callable->type_name;
  if (IsDataClass(fn)) return DataClassObject(callable, args, false, arena);
  if (fn.starts_with("torch.jit._pickle.")) {
    const auto& a = Args(args, fn);
    const size_t want = fn.ends_with("restore_type_tag") ? 2 : 1;
    if (a.size() != want) Bad(fn, "wrong number of arguments");
    if (want == 2 && a[1]->kind != ValueKind::kStr) Bad(fn, "the type tag is not a string");
    return a[0];
  }
  if (fn == "torch._utils._rebuild_tensor_v2" || fn == "torch._utils._rebuild_tensor") {
    const auto& a = Args(args, fn);
    const bool v2 = fn.ends_with("v2");
    if (a.size() < 4 || (v2 && (a.size() < 6 || a.size() > 7))) Bad(fn, "wrong number of arguments");
    Value* t = MakeTensor(a[0], a[1], a[2], a[3], std::nullopt, arena, fn.c_str());
    if (v2) {
      if (!IsBool(a[4])) Bad(fn, "requires_grad is not a bool");
      t->tensor->requires_grad = a[4]->boolean;
    }
    return t;
  }
  if (fn == "torch._utils._rebuild_tensor_v3") {
    const auto& a = Args(args, fn);
    if (a.size() < 7 || a.size() > 8) Bad(fn, "wrong number of arguments");
    auto dtype = DTypeOfGlobal(a[6]);
    if (!dtype) Bad(fn, "dtype argument " + Spelled(a[6]) + " is not a known torch dtype");
    Value* t = MakeTensor(a[0], a[1], a[2], a[3], dtype, arena, fn.c_str());
    if (!IsBool(a[4])) Bad(fn, "requires_grad is not a bool");
    t->tensor->requires_grad = a[4]->boolean;
    return t;
  }
  if (fn == "torch._utils._rebuild_qtensor") {
    const auto& a = Args(args, fn);
    if (a.size() != 7) Bad(fn, "wrong number of arguments");
    Value* t = MakeTensor(a[0], a[1], a[2], a[3], std::nullopt, arena, fn.c_str());
    if (Info(t->tensor->dtype).kind != DTypeKind::kQuantized) Bad(fn, "storage is not a quantized type");
    if (!IsBool(a[5])) Bad(fn, "requires_grad is not a bool");
    t->tensor->requires_grad = a[5]->boolean;
    quantized_.push_back({t->tensor, a[4]});
    return t;
  }
  if (fn == "torch._utils._rebuild_parameter" || fn == "torch._utils._rebuild_parameter_with_state" ||
      fn == "torch.nn.parameter.Parameter") {
    const auto& a = Args(args, fn);
    if (a.empty() || a[0]->kind != ValueKind::kTensor) Bad(fn, "data is not a tensor");
    Value* t = arena.Tensor(*a[0]->tensor);
    views_.push_back(t->tensor);
    t->tensor->is_parameter = true;
    t->tensor->requires_grad = a.size() > 1 && IsBool(a[1]) ? a[1]->boolean : true;
    if (fn.ends_with("with_state") && a.size() == 4) t->state = a[3];
    return t;
  }
  if (fn == "torch._utils._rebuild_meta_tensor_no_storage") {
    const auto& a = Args(args, fn);
    if (a.size() < 3 || a.size() > 4) Bad(fn, "wrong number of arguments");
    auto dtype = DTypeOfGlobal(a[0]);
    if (!dtype) Bad(fn, "dtype argument " + Spelled(a[0]) + " is not a known torch dtype");
    TensorView view;
    view.dtype = *dtype;
    view.shape = IntTuple(a[1], fn, "size");
    view.strides = IntTuple(a[2], fn, "stride");
    view.has_data = false;
    view.requires_grad = a.size() == 4 && IsBool(a[3]) && a[3]->boolean;
    Value* t = arena.Tensor(std::move(view));
    views_.push_back(t->tensor);
    return t;
  }
  if (fn == kRebuildFromType) {
    // _rebuild_from_type_v2(func, new_type, args, state) = func(*args) as new_type with state.
    // Its func may be itself: the chain is unwound in a loop (innermost call first, then each
    // layer's type and state outwards, as Python applies them) and its length is capped.
    std::vector<const std::vector<Value*>*> layers;
    Value* inner_fn = callable;
    Value* inner_args = args;
    while (inner_fn->kind == ValueKind::kGlobal && inner_fn->type_name == kRebuildFromType) {
      if (layers.size() == kMaxRebuildFromTypeNesting) {
        Fail(ErrorCode::kLimit, fn + " nested deeper than kMaxRebuildFromTypeNesting (" +
                                    std::to_string(kMaxRebuildFromTypeNesting) + ")");
      }
      const auto& a = Args(inner_args, fn);
      if (a.size() != 4) Bad(fn, "wrong number of arguments");
      layers.push_back(&a);
      inner_fn = a[0];
      inner_args = a[2];
    }
    Value* inner = Call(inner_fn, inner_args, arena);  // not _rebuild_from_type_v2: no further nesting
    for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
      const auto& a = **layer;
      if (inner->kind == ValueKind::kTensor) {
        if (a[1]->kind == ValueKind::kGlobal && a[1]->type_name != "torch.Tensor") inner->type_name = a[1]->type_name;
        if (a[3]->kind == ValueKind::kDict && !a[3]->entries.empty()) inner->state = a[3];
      } else if (inner->kind == ValueKind::kObject && inner->type_name == "torch._utils._rebuild_wrapper_subclass" &&
                 a[1]->kind == ValueKind::kGlobal && IsDataClass(a[1]->type_name) && inner->state == nullptr) {
        // A wrapper subclass the format knows (ShardedTensor, DTensor): its class, the wrapper's
        // arguments (dtype, global size, ...) and the state its __setstate__ would take.
        inner->type_name = a[1]->type_name;
        inner->state = a[3];
      }
    }
    return inner;
  }
  if (fn == kLegacyTensor) {
    // torch.Tensor(): an empty tensor its BUILD fills (see Build); a data object until then.
    return arena.Object(std::string(kLegacyTensor), args);
  }
  if (fn == kTorchVersion) {
    const auto& a = Args(args, fn);
    if (a.size() != 1 || a[0]->kind != ValueKind::kStr) Bad(fn, "is not made of one string");
    return a[0];
  }
  if (fn == "torch._utils._rebuild_device_tensor_from_cpu_tensor") {
    const auto& a = Args(args, fn);
    if (a.empty() || a[0]->kind != ValueKind::kTensor) Bad(fn, "first argument is not a tensor");
    return a[0];
  }
  if (fn == "torch.Size") {
    const auto& a = Args(args, fn);
    Value* tuple = arena.Tuple();
    if (a.size() == 1) {
      IntTuple(a[0], fn, "size");
      tuple->items = a[0]->items;
    } else if (!a.empty()) {
      Bad(fn, "wrong number of arguments");
    }
    tuple->type_name = "torch.Size";
    return tuple;
  }
  if ((fn == "torch.device" || fn == "torch.serialization._get_layout" || fn.starts_with("torch._utils._rebuild_")) &&
      IsTorchDataName(callable)) {
    // Shown as inert objects: devices, layouts, sparse/nested/wrapper tensors (their component
    // tensors stay reachable through the arguments).
    if (fn == "torch.serialization._get_layout") {
      const auto& a = Args(args, fn);
      // _get_layout('torch.sparse_coo'): a layout's name; any other text is not made a name.
      if (a.size() == 1 && a[0]->kind == ValueKind::kStr && a[0]->text.starts_with("torch.") &&
          TorchDataName("torch", a[0]->text.substr(6))) {
        return arena.Global(a[0]->text);
      }
    }
    return arena.Object(fn, args);
  }
  return DataResolver::Call(callable, args, arena);
}

Value* TorchResolver::Build(Value* object, Value* state, ValueArena& arena) {
  if (object != nullptr && object->kind == ValueKind::kObject && object->type_name == kLegacyTensor &&
      !object->unknown_class && state->kind == ValueKind::kTuple) {
    // torch.Tensor.__setstate__: (storage, offset, size, stride) is set_(...); a Variable's
    // (data, _, backward_hooks, requires_grad, _) is that tensor. The node becomes the tensor in
    // place, so memo references to it see it.
    const std::string fn = "torch.Tensor state";
    const auto& a = state->items;
    Value* t = nullptr;
    if (a.size() == 4) {
      t = MakeTensor(a[0], a[1], a[2], a[3], std::nullopt, arena, fn.c_str());
    } else if (a.size() == 5 && a[0]->kind == ValueKind::kTensor && IsBool(a[3])) {
      t = arena.Tensor(*a[0]->tensor);
      views_.push_back(t->tensor);
      t->tensor->requires_grad = a[3]->boolean;
    } else if (a.size() == 3 && IsBool(a[0])) {
      // (requires_grad, _, hooks): the empty tensor torch.Tensor() made stays empty.
      TensorView empty;
      empty.shape = {0};
      empty.strides = {1};
      empty.storage = SharedBytes::CopyOf(nullptr, 0);
      empty.requires_grad = a[0]->boolean;
      t = arena.Tensor(std::move(empty));
    } else {
      Bad(fn, "is neither (storage, offset, size, stride), a Variable's (data, _, hooks, requires_grad, _) nor "
              "(requires_grad, _, hooks)");
    }
    object->kind = ValueKind::kTensor;
    object->tensor = t->tensor;
    object->type_name.clear();
    object->args = nullptr;
    return object;
  }
  if (object != nullptr && object->kind == ValueKind::kObject && object->type_name == kPickledTensorDict &&
      state != nullptr && state->kind == ValueKind::kDict) {
    // A TensorDict torch.save pickled (TensorDict.__getstate__: its __dict__): its entries are
    // state["_tensordict"] (a tensordict.utils._StringOnlyDict); the rest (_batch_size, _device,
    // names...) are its attributes. It becomes the tensordict level trove reads from directories
    // too; the .pt writer makes it a TensorDict again (nothing lost).
    const Value* entries = nullptr;
    Value* rest = arena.Dict();
    for (const auto& [k, v] : state->entries) {
      if (k->kind == ValueKind::kStr && k->text == "_tensordict" &&
          (v->kind == ValueKind::kDict || v->kind == ValueKind::kObject)) {
        entries = v;
      } else {
        rest->entries.emplace_back(k, v);
      }
    }
    if (entries != nullptr) {
      object->kind = ValueKind::kDict;
      object->type_name = std::string(kTensorDictLevel);
      object->unknown_class = false;
      object->new_object = false;
      object->args = nullptr;
      object->entries = entries->entries;
      object->state = rest;
      return object;
    }
  }
  if (object != nullptr && object->kind == ValueKind::kObject && !object->unknown_class && IsDataClass(object->type_name)) {
    if (object->state != nullptr) Fail(ErrorCode::kCorrupt, "'" + object->type_name + "' built twice");
    object->state = state;
    return object;
  }
  if (object != nullptr && object->kind == ValueKind::kTensor) {
    // Parameter.__setstate__ / tensor subclasses' Python attributes: kept, never applied.
    object->state = state;
    return object;
  }
  return DataResolver::Build(object, state, arena);
}

void TorchResolver::StoragesAsTensors(ValueArena& arena) {
  // Only the handles this resolver made: another resolver's (a TorchScript archive's constants)
  // may share the arena, its indexes its own.
  for (Value* handle : handles_) {
    Value& v = *handle;
    if (v.kind != ValueKind::kObject || v.type_name != kStorageHandle) continue;
    const StorageRef& ref = refs_[static_cast<size_t>(v.integer)];
    const TorchStorage& s = storages_[ref.storage];
    TensorView view;
    view.dtype = s.dtype.value_or(DType::kUInt8);  // an UntypedStorage is bytes
    const uint64_t esize = ElementSize(view.dtype);
    view.shape = {ref.numel >= 0 ? ref.numel : static_cast<int64_t>(s.declared_bytes / esize)};
    view.strides = {1};
    view.storage_offset = ref.offset;
    view.storage_index = storage_index_base + static_cast<int64_t>(ref.storage);
    view.storage_key = storage_folder + s.key;
    view.bare_storage = true;
    view.untyped_storage = !s.dtype;
    v.kind = ValueKind::kTensor;
    v.type_name.clear();
    v.args = nullptr;
    v.integer = 0;
    v.tensor = arena.AddTensorView(std::move(view));
    views_.push_back(v.tensor);
  }
}

void TorchResolver::Finish(const std::function<std::string(const TensorView*)>& key_of) {
  for (TensorView* view : views_) {
    if (view->has_data) {
      const TorchStorage& s = storages_[static_cast<size_t>(view->storage_index - storage_index_base)];
      if (!s.resolved) Fail(ErrorCode::kCorrupt, "tensor '" + key_of(view) + "': storage '" + s.key + "' has no data");
      view->storage = s.bytes;
    }
    view->byte_order = byte_order;
    WithContext("tensor '" + key_of(view) + "'", [&] { view->Validate(); });
  }
  for (const auto& q : quantized_) {  // (a lambda cannot capture a structured binding in clang 14)
    WithContext("tensor '" + key_of(q.first) + "': quantizer", [&] { q.first->quantizer = ReadQuantizer(*q.second, *q.first); });
  }
}

// quantizer_params as torch._utils._rebuild_qtensor takes them (trove/quantizer.h):
//   (torch.per_tensor_affine, scale, zero_point)
//   (torch.per_channel_affine | torch.per_channel_affine_float_qparams, scales, zero_points, axis)
std::shared_ptr<const Quantizer> TorchResolver::ReadQuantizer(const Value& params, const TensorView& tensor) {
  const Value& p = params;
  if (p.kind != ValueKind::kTuple || p.items.empty() || p.items[0]->kind != ValueKind::kGlobal) {
    Fail(ErrorCode::kCorrupt, "quantizer_params is not a (qscheme, ...) tuple");
  }
  const std::string& name = p.items[0]->type_name;
  const std::optional<QScheme> scheme = name.starts_with("torch.") ? QSchemeOfName(std::string_view(name).substr(6)) : std::nullopt;
  if (!scheme) Fail(ErrorCode::kUnsupported, "quantization scheme '" + name + "' is not one trove reads");
  auto q = std::make_shared<Quantizer>();
  q->scheme = *scheme;
  auto number = [](const Value* v, const char* what) {
    if (v->kind == ValueKind::kFloat) return v->real;
    if (v->kind == ValueKind::kInt && !v->is_big_int()) return static_cast<double>(v->integer);
    FailQuantizerParameter(what, " is not a number");
  };
  auto integer = [](const Value* v, const char* what) {
    if (v->kind != ValueKind::kInt || v->is_big_int()) FailQuantizerParameter(what, " is not an int");
    return v->integer;
  };
  if (*scheme == QScheme::kPerTensorAffine) {
    if (p.items.size() != 3) Fail(ErrorCode::kCorrupt, "per_tensor_affine takes (qscheme, scale, zero_point)");
    q->scale = number(p.items[1], "scale");
    q->zero_point = integer(p.items[2], "zero point");
  } else {
    if (p.items.size() != 4) Fail(ErrorCode::kCorrupt, name + " takes (qscheme, scales, zero_points, axis)");
    auto tensor_of = [](const Value* v, const char* what) {
      if (v->kind != ValueKind::kTensor) FailQuantizerParameter(what, " are not a tensor");
      return std::make_shared<const TensorView>(*v->tensor);
    };
    q->scales = tensor_of(p.items[1], "scales");
    q->zero_points = tensor_of(p.items[2], "zero points");
    q->axis = integer(p.items[3], "axis");
    // torch pickles both per-channel schemes as per_channel_affine; float zero points say which.
    if (Info(q->zero_points->dtype).kind == DTypeKind::kFloat) q->scheme = QScheme::kPerChannelAffineFloatQParams;
  }
  ValidateQuantizer(*q, tensor);
  return q;
}

}  // namespace trove
