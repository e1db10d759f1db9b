// trove/document.h: a file as trove reads it, the model in the middle of every conversion.
//
// Every reader (.pt, tensordict, .tdz, .psk.d) returns a Document: a value tree (root) whose
// tensor nodes are zero-copy views, the flat list of tensors under their key paths, and the
// container's own records and properties for `trove info`. Every writer consumes one.
// A Document keeps its file mapped for as long as it or any view of it lives.
// Documents are immutable once returned; reading from many threads is safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trove/value.h"

namespace trove {

// A tensor and where it sits in the tree.
struct NamedTensor {
  std::string key;           // key path: %-encoded components joined by '/' (see EncodeKeyComponent)
  const TensorView* view;    // owned by the document's arena
};

// One record/member of the container (zip entry, file of a directory, header block).
struct ContainerRecord {
  std::string name;
  uint64_t offset = 0;        // where the payload starts in the file
  uint64_t size = 0;          // payload size after decompression
  uint64_t stored_size = 0;   // size as stored
  std::string method;         // "stored", "deflate", "bzip2", "lzma", "file", ...
  uint32_t crc32 = 0;
};

// A property of the container (`trove info` lists them): a text as the file says it, a count or
// number, or a flag. `text` is always set (an integer's decimal, a flag's "true"/"false"), so
// people read every kind alike; --json and Python get the typed value.
struct PropertyValue {
  enum class Type : uint8_t { kText, kInteger, kBoolean };
  Type type = Type::kText;
  std::string text;
  int64_t integer = 0;
  bool boolean = false;

  PropertyValue(std::string t) : text(std::move(t)) {}  // NOLINT: a text property is the common case
  PropertyValue(const char* t) : text(t) {}             // NOLINT
  static PropertyValue Integer(int64_t value);
  static PropertyValue Boolean(bool value);
  // An integer when `text` is one in canonical decimal (a record holding "3"), else the text.
  static PropertyValue IntegerOrText(std::string text);
};

struct Document {
  std::string format;  // "pt", "pt-legacy", "tensordict", "tdz", "pskd"
  std::string path;
  uint64_t file_size = 0;
  std::shared_ptr<ValueArena> arena = std::make_shared<ValueArena>();
  Value* root = nullptr;
  std::vector<NamedTensor> tensors;
  // Ordered: {"byteorder", "little"}, {"byteorder_assumed", false}, {"version", 3}, ...
  std::vector<std::pair<std::string, PropertyValue>> properties;
  std::vector<ContainerRecord> records;
  std::vector<std::string> warnings;
  // Key-path prefixes (ending in '/') of tensors a document holds beside what it stands for: they
  // are listed (info, cat, FindTensor) but convert, diff, stats and Python's keys() leave them out
  // unless --keys (or a name) asks for them: a DeepSpeed checkpoint's 16-bit module weights and
  // optimizer moments beside its fp32 master weights (docs/deepspeed.md). Empty for most formats.
  std::vector<std::string> opt_in_prefixes;

  // True for a key path under one of opt_in_prefixes.
  bool IsOptIn(std::string_view key_path) const;
  // By key path; a path holding '/' that names no tensor is also tried as one component (a
  // flat file's name with '/' in it, asked for by that name).
  const NamedTensor* FindTensor(std::string_view key) const;
  // The value at a key path, as `tensors` and ForEachLeaf name them: a dict entry by its key's
  // component (DictKeyComponents), a dict's attribute by `%attr:<component>`, a list or tuple
  // item by its decimal index; an object is looked through (its state, its constructor
  // arguments, then its own entries and items, each part named as the walks name it) as the
  // walks do. "" is the root. Null when no value is there. Throws Error(kLimit) past
  // kMaxTreeVisits nodes.
  const Value* FindValue(std::string_view key_path) const;
  const std::string* Property(std::string_view name) const;  // the property's text, or null
};

// What a reader does with the globals a pickle names (docs/security.md, "Three classes of
// globals"). Nothing is ever imported or run under any policy.
enum class PicklePolicy : uint8_t {
  // Only names with a known data meaning; any other global is Error(kRefused).
  kStrict,
  // Data names are read as data; a dangerous name (what hostile pickles call: processes, files,
  // imports, eval, the network, reflection) is Error(kRefused) naming it; any other class becomes
  // an inert object (Value::unknown_class) and a name merely referenced stays a name.
  kDefault,
  // As kDefault, but dangerous names become inert objects too (for looking at hostile files).
  kPermissive,
};
std::string_view PicklePolicyName(PicklePolicy policy);  // "strict", "default", "permissive"

// Reading policy shared by all readers.
struct ReadOptions {
  PicklePolicy pickle_policy = PicklePolicy::kDefault;
  // Decode pickled sidecars (tensordict other.pickle) with trove's data-only unpickler.
  bool allow_pickle = false;
};

// Key paths. A component is %-encoded like a tensordict file name: each of / \ < > : " | ? *,
// space, %, bytes 0-31 and 127, and every byte that is not part of a UTF-8 character (a bytes
// key's, a lone surrogate's) becomes %XX (uppercase hex); "" becomes "%", "." "%2E",
// ".." "%2E%2E"; everything else (non-ASCII text included) is kept. Components join with '/':
// a key path is always valid UTF-8.
std::string EncodeKeyComponent(std::string_view key);
// Inverse of EncodeKeyComponent; for a typed component (`%int:1`, see DictKeyComponents; also
// `%attr:`, `%arg:`, `%entry:`, `%item:`, and several prefixes at once) the key's text ("1"),
// as a format with only string keys would hold it. Throws Error(kUsage) on a
// malformed escape.
std::string DecodeKeyComponent(std::string_view encoded);
// A tensor's name in a format of flat string names (safetensors, GGUF, .npz members): the key
// path's components decoded (DecodeKeyComponent) and joined by '/' ("<frida>" for the key path
// "%3Cfrida%3E", "state/0/exp_avg" for an optimizer's int key 0).
std::string FlatName(std::string_view key_path);
// Each key path's name as the file spells it, for people and scripts: its components unescaped
// and joined by '/' (the safetensors name "model/x", key path "model%2Fx", is "model/x"; a .pt
// file's {"model": {"x": t}} is "model/x" too). A component that is no str key's (`%int:1`) or
// whose text is not UTF-8 stays escaped; names two key paths would share keep their key paths,
// which are unique. Python's keys() follow the same rule. Document::FindTensor finds a tensor
// by either form.
std::vector<std::string> VerbatimNames(const std::vector<std::string>& key_paths);
// A dict's entries whose keys spell one component (int 1 and str "1", True and "True", None
// and "None") get distinct components: a str key keeps the plain one, any other key is named
// `%<kind>:<encoded text>` (`%int:1`, `%bool:True`, `%None:None`), and keys of one kind that
// still collide (tuples (1,) and ("1",)) `%<kind>#<entry index>:<encoded text>`. No str key
// encodes to such a component (its '%' is never followed by a letter and ':'). Keys that spell
// no other key's component keep the plain one. Returns the component of every entry, in order.
// Throws Error(kLimit) as KeyComponentText does.
std::vector<std::string> DictKeyComponents(const Value& dict);
// True when a dict's keys may need DictKeyComponents' disambiguation (some key is not a str).
bool HasNonStrKeys(const Value& dict);
// Whether a dict has attributes (an OrderedDict's or a dict subclass's BUILD state, its
// __dict__), and their components: `%attr:<component of the key>`, listed after the entries.
bool HasAttributes(const Value& dict);
std::vector<std::string> AttributeComponents(const Value& dict);
// What an object node holds, with the component each part is reached by, in the walks' order.
// Its state is looked through (a module's `_parameters/weight`, a config's `lr`): a dict or a
// list state is walked as if it were the object, a scalar or tensor state is the object's own
// value; an object as state (only crafted files nest them so) is `%state`. Its constructor
// arguments come by index, then what SETITEM(S) and APPEND(S) gave it, by key and by index. A
// part whose component an earlier part already uses (a state key "0" and the first argument, a
// state key "k" and an entry "k") is named with its part: `%arg:0`, `%entry:k`, `%item:0`; no
// key spells these, so every path is one value's. Throws Error(kLimit) as KeyComponentText does.
struct ObjectPart {
  const Value* node;
  std::string component;  // "" when transparent
  bool transparent;       // walked as the object itself (its components are the node's own)
};
std::vector<ObjectPart> ObjectParts(const Value& object);
std::string JoinKeyPath(const std::vector<std::string>& encoded_components);
std::vector<std::string> SplitKeyPath(std::string_view key_path);
// The component a dict key stands for: str as is, int in decimal, bool as True/False, None as
// None, other kinds in a Python-like repr. Built without recursion; a key nested deeper than
// kMaxValueDepth or spelling more than kMaxKeyTextBytes is Error(kLimit).
std::string KeyComponentText(const Value& key);

// Nesting beyond which a value tree is refused (Error(kLimit)). torch.save cannot write more than
// about 500 levels (Python's recursion limit stops its pickler; tests/python/test_hostile_depth.py),
// real checkpoints nest a few dozen; deeper trees come only from crafted files, and the cap keeps
// the per-leaf cost of every walk (its key path) bounded.
inline constexpr size_t kMaxValueDepth = 10'000;
// The longest text one key stands for. Tuple keys shared through the pickle memo can spell a text
// exponential in the file's size; no checkpoint names a tensor with a megabyte.
inline constexpr size_t kMaxKeyTextBytes = size_t{1} << 20;

// Walks the tree from `root` and lists every tensor under its key path, in tree order, through
// dicts (by key, see DictKeyComponents; then their attributes, a dict subclass's or an
// OrderedDict's BUILD state, each as `%attr:<component>`), lists/tuples (by index) and object
// nodes, which are looked through: their state (a dict or list state's components are the
// object's; an object as state is `%state`), then their arguments (by index), then what
// SETITEM(S) and APPEND(S) put in them (entries by key, items by index). A part whose component
// an earlier part of the object already spells is named with its part (`%arg:0`, `%entry:k`,
// `%item:0`), which no key spells: every key path names one value (docs/pt.md). A tensor
// reached by two paths is listed under both. The walk is iterative and bounded: it stops with
// Error(kLimit) after kMaxTreeVisits nodes, once the nodes it reaches again inside subtrees it
// has walked before outnumber RepeatedVisitsAllowed (memo-DAG "billion laughs"), below
// kMaxValueDepth levels, or once the key paths of the nodes visited add up to
// kMaxTreePathBytes; it never loops on cycles.
inline constexpr uint64_t kMaxTreeVisits = 10'000'000;  // far above any real checkpoint's node count
// Nodes visited again because a container is reached by a second path. Real checkpoints share
// tensors (leaves, free) and now and then a config dict or a list, a few times over; a pickle
// whose memo doubles a list at each of n levels spells 2^n nodes in a few bytes per level. A
// walk may repeat kRepeatedVisitsFree nodes plus kMaxRepeatRatio per node it visits once, which
// keeps every walk of such a file (`info`, `diff`, `cat`) to milliseconds.
inline constexpr uint64_t kRepeatedVisitsFree = uint64_t{1} << 16;
inline constexpr uint64_t kMaxRepeatRatio = 4;
constexpr uint64_t RepeatedVisitsAllowed(uint64_t fresh_visits) {
  return kRepeatedVisitsFree + kMaxRepeatRatio * fresh_visits;
}
// Key path bytes one walk may spell, summed over the nodes it visits: shared subtrees under long
// keys would otherwise make paths of gigabytes from a small file. 4M nodes x 64 B paths fit.
inline constexpr uint64_t kMaxTreePathBytes = uint64_t{256} << 20;
std::vector<NamedTensor> CollectTensors(const Value* root);

// The expansion rule (trove/tensor.h: kMaxExpandRatio, kMaxInflateRatio, kExpandFreeBytes) for
// writing `tensors` out, checked before anything is written. Throws Error(kLimit) naming the
// tensor or the compressed entry, the bytes, the ratio and the cap (and --allow-expand):
//  - unless `views_kept` (.pt keeps views and shared storages as they are): a view whose bytes
//    exceed kMaxExpandRatio times its storage, or all the views together exceeding
//    kMaxExpandRatio times the storages they view, each storage counted once;
//  - compressed storages that together inflate beyond kMaxInflateRatio times the bytes all the
//    storages written occupy in the file.
// Reads sizes only: nothing is inflated or touched. Meta tensors write nothing.
void CheckExpansion(const std::vector<NamedTensor>& tensors, bool views_kept);

// The value an object node merely wraps, or null: tensordict's NonTensorData stands for its
// `data`. Readers keep the wrapper (nothing lost); walks, diffs and other formats see the value.
const Value* StandsFor(const Value& node);

// The same walk, calling fn(key path, leaf) for every tensor and every scalar (None, bool, int,
// float, complex, str, bytes, global) and for sets and torch.Size tuples (each as one leaf), in
// tree order; inside a dict's attributes only for tensors (a state_dict's _metadata is its
// class's bookkeeping, not a value of the checkpoint). A wrapper that
// stands for a value (see StandsFor) is walked as that value.
void ForEachLeaf(const Value* root, const std::function<void(const std::string& path, const Value& leaf)>& fn);

// The objects of classes trove gives no data meaning (Value::unknown_class) reachable from
// `root`, each under the key path the walk reaches it by first, in tree order; bounded as
// ForEachLeaf is. Objects inside such an object are not listed apart (the outer one holds them).
struct UnknownObject {
  std::string key;  // "" for the root
  const Value* node;
};
std::vector<UnknownObject> FindUnknownObjects(const Value* root);
// The same for a document's root, without a walk when its arena holds no such object at all.
std::vector<UnknownObject> FindUnknownObjects(const Document& doc);
// "a.B (2), c.D": the classes of `objects`, each once with its count, in order of first use,
// at most `max_classes` of them ("and N more classes"); text for people, each name escaped as
// names are shown (src/core/display_escape.h).
std::string UnknownClassesText(const std::vector<UnknownObject>& objects, size_t max_classes = 8);

}  // namespace trove
