#include "pickle/pickle_scan.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/display_escape.h"
#include "core/float_text.h"
#include "core/utf8.h"
#include "pickle/global_class.h"
#include "trove/document.h"
#include "trove/error.h"
#include "trove/unpickler.h"

namespace trove {
namespace {

// Caps (reasons):
// Pickles nested as bytes inside pickles (pickle.loads(b"...")): each level is scanned by its own
// VM pass; real files have none, and three levels show the trick without letting a file
// multiply the scan's work.
constexpr int kMaxNestedPickleDepth = 3;

// A global's grade follows what its name resolves to (pickle/global_class.h): anything that runs
// code, reaches other names, loads another pickle, touches files or the network is critical,
// whatever attribute chain spells it; a class trove merely does not know, which the pickle makes
// instances of, is high; a name of no known meaning it only refers to is medium.
// How the default read policy takes a global (docs/security.md, "Three classes of globals"):
// "data" (allowed by the resolver), "dangerous" (refused), "unknown" (an inert object: the pickle
// makes instances of it) or "name" (of no known meaning, but only referred to: read as a name).
std::string_view PolicyClass(const PickleGlobal& g, const GlobalVerdict& v, bool instantiated) {
  if (g.allowed) return "data";
  if (g.via == PickleGlobalVia::kExtension || v.klass != GlobalClass::kUnknown) return "dangerous";
  if (g.via == PickleGlobalVia::kComputed || g.after_stop || instantiated) return "unknown";
  return "name";
}

// The finding for one global the unpickler listed that its resolver did not allow.
Finding GlobalFinding(const std::string& entry, const PickleGlobal& g, const std::string& dotted, bool instantiated,
                      bool as_dict) {
  const std::string where = g.after_stop ? " (past where reading stopped; found by the lexical pass)" : "";
  if (g.via == PickleGlobalVia::kExtension) {
    return {Severity::kCritical, entry, g.offset,
            "copyreg extension code " + std::to_string(g.extension_code) +
                ": a global chosen at run time from the extension registry (can be any callable)" + where,
            {}, {}};
  }
  if (g.via == PickleGlobalVia::kComputed) {
    return {Severity::kHigh, entry, g.offset,
            "STACK_GLOBAL whose module and name are computed, not literal: the global it reaches is unknown" + where,
            {}, {}};
  }
  const GlobalVerdict v = ClassifyGlobal(dotted);
  std::string message = "global '" + dotted + "' is not in the allowlist";
  if (v.klass != GlobalClass::kUnknown) {
    message += "; it resolves to " + v.target + " (" + std::string(GlobalClassName(v.klass)) + ": " +
               std::string(GlobalClassEffect(v.klass)) + "): dangerous, trove refuses the file";
    return {Severity::kCritical, entry, g.offset, message + where, {}, {}};
  }
  if (PolicyClass(g, v, instantiated) == "name") {
    // torch.load imports its module (which runs that module's code) but calls nothing in it.
    return {Severity::kMedium, entry, g.offset,
            message + "; only referred to, never called: trove reads it as a name" + where, {}, {}};
  }
  return {Severity::kHigh, entry, g.offset,
          message + (as_dict ? "; a dict subclass: trove reads its instances as dicts keeping the class name"
                             : "; trove reads what the pickle makes of it as an inert object") + where,
          {}, {}};
}

std::string GlobalText(const PickleGlobal& g) {
  if (g.via == PickleGlobalVia::kExtension) return "copyreg extension " + std::to_string(g.extension_code);
  if (g.via == PickleGlobalVia::kComputed) return "STACK_GLOBAL (computed name)";
  return g.module + "." + g.name;
}

// Passes every question to the resolver a reader would use, and notes what the unpickler asked
// that no data file needs: BUILD on a global itself (setattr on a class or function: the
// "BUILD on an allowed global" bypass rewires an allowed name before it is used) and calls of a
// value that is not a named global (gadget chains call what an earlier call returned).
class ScanResolver : public PickleResolver {
 public:
  explicit ScanResolver(PickleResolver& inner) : inner_(inner) {}
  Value* Global(const std::string& module, const std::string& name, bool& allowed, ValueArena& arena) override {
    return inner_.Global(module, name, allowed, arena);
  }
  Value* Call(Value* callable, Value* args, ValueArena& arena) override {
    NoteCall(callable);
    return inner_.Call(callable, args, arena);
  }
  Value* NewObject(Value* cls, Value* args, ValueArena& arena) override {
    NoteCall(cls);
    return inner_.NewObject(cls, args, arena);
  }
  Value* Build(Value* object, Value* state, ValueArena& arena) override {
    if (object != nullptr && object->kind == ValueKind::kGlobal) {
      notes.push_back({Severity::kHigh, "BUILD on the global '" + object->type_name +
                                            "' itself: sets attributes of a class or function (rewires it in Python)"});
    }
    return inner_.Build(object, state, arena);
  }
  Value* PersistentLoad(Value* pid, ValueArena& arena) override { return inner_.PersistentLoad(pid, arena); }
  PicklePolicy policy() const override { return inner_.policy(); }

  struct Note {
    Severity severity;
    std::string message;
  };
  std::vector<Note> notes;

 private:
  void NoteCall(const Value* callable) {
    if (callable != nullptr && callable->kind != ValueKind::kGlobal) {
      notes.push_back({Severity::kMedium, "REDUCE/NEWOBJ calls a " + std::string(KindName(callable->kind)) +
                                              " value, not a named global"});
    }
  }
  PickleResolver& inner_;
};

// Caps (reasons): the walk that finds where a refused global is used visits at most this many
// nodes (a real pickle's tree is far smaller), a key path it reports is cut at this length (a
// place for a person to look, not a name to look up; without a cut a chain of a million lists
// would copy paths quadratic in the file's size), and a call's text is cut at this length
// (enough to read a shell command; a report is not a dump).
constexpr uint64_t kMaxCallSiteVisits = uint64_t{1} << 20;
constexpr size_t kMaxCallSitePathBytes = 1024;
constexpr size_t kMaxCallTextBytes = 240;
constexpr int kMaxCallTextDepth = 6;

// Python-like text of a call's arguments, bounded: "'echo hi'", "b'\x80...'", "(1, 2.0)".
void AppendArgText(const Value& v, int depth, std::string& out) {
  if (out.size() > kMaxCallTextBytes) return;
  if (depth > kMaxCallTextDepth) {
    out += "...";
    return;
  }
  // A str or bytes as Python's repr, in the display notation (core/display_escape.h), cut at
  // the text's budget (at a character's start).
  auto quoted = [&](std::string_view s, const char* prefix) {
    out += prefix;
    out += '\'';
    const bool bytes = *prefix == 'b';
    const size_t room = kMaxCallTextBytes > out.size() ? kMaxCallTextBytes - out.size() : 0;
    const size_t cut = bytes ? std::min(s.size(), room) : utf8::CutLength(s, room);
    AppendEscapedForDisplay(s.substr(0, cut), out, bytes ? DisplayEscape::kBytes : DisplayEscape::kName, '\'');
    if (cut < s.size()) out += "...";
    out += '\'';
  };
  auto items = [&](const std::vector<Value*>& list, const char* open, const char* close, bool tuple) {
    out += open;
    for (size_t i = 0; i < list.size(); ++i) {
      if (i) out += ", ";
      if (out.size() > kMaxCallTextBytes) {
        out += "...";
        break;
      }
      AppendArgText(*list[i], depth + 1, out);
    }
    if (tuple && list.size() == 1) out += ',';
    out += close;
  };
  switch (v.kind) {
    case ValueKind::kNone: out += "None"; return;
    case ValueKind::kBool: out += v.boolean ? "True" : "False"; return;
    case ValueKind::kInt: out += v.IntToString(); return;
    case ValueKind::kFloat: AppendFloatText(v.real, out); return;
    case ValueKind::kComplex: out += ComplexText(v.real, v.imag); return;
    case ValueKind::kStr: quoted(v.text, ""); return;
    case ValueKind::kBytes: quoted(v.text, "b"); return;
    case ValueKind::kList: items(v.items, "[", "]", false); return;
    case ValueKind::kTuple: items(v.items, "(", ")", true); return;
    case ValueKind::kSet: case ValueKind::kFrozenSet: items(v.items, "{", "}", false); return;
    case ValueKind::kDict: {
      out += '{';
      for (size_t i = 0; i < v.entries.size(); ++i) {
        if (i) out += ", ";
        if (out.size() > kMaxCallTextBytes) {
          out += "...";
          break;
        }
        AppendArgText(*v.entries[i].first, depth + 1, out);
        out += ": ";
        AppendArgText(*v.entries[i].second, depth + 1, out);
      }
      out += '}';
      return;
    }
    case ValueKind::kTensor: out += "tensor"; return;
    case ValueKind::kGlobal: AppendEscapedForDisplay(v.type_name, out); return;
    case ValueKind::kObject:
      AppendEscapedForDisplay(v.type_name, out);
      if (v.args && v.args->kind == ValueKind::kTuple) items(v.args->items, "(", ")", false);
      else out += "(...)";
      return;
  }
}

// "posix.system('echo hi')" for a call node; the bare name for a global used as a value. Text
// for people: names and strings escaped (core/display_escape.h).
std::string CallText(const Value& node) {
  std::string out = EscapeForDisplay(node.type_name);
  if (node.kind == ValueKind::kObject) {
    if (node.args && node.args->kind == ValueKind::kTuple) {
      out += '(';
      for (size_t i = 0; i < node.args->items.size(); ++i) {
        if (i) out += ", ";
        AppendArgText(*node.args->items[i], 1, out);
        if (out.size() > kMaxCallTextBytes) break;
      }
      out += ')';
    } else if (node.args) {
      out += "(*";
      AppendArgText(*node.args, 1, out);
      out += ')';
    }
    if (node.state) out += " then BUILD with state";
  }
  return out;
}

struct CallSite {
  std::string key_path;
  std::string call;
};

// Where the tree uses each name in `names` (a call node, or the global itself as a value), in tree
// order, with key paths as ForEachLeaf spells them (a dict's attributes as `%attr:<key>`, an
// object's parts as ObjectParts names them), cut at kMaxCallSitePathBytes. A node is a site once,
// at the first path that reaches it: a node the memo shares is one call in the pickle, and a
// cycle or a memo DAG is walked in time linear in its nodes.
std::map<std::string, std::vector<CallSite>> CallSites(const Value* root, const std::set<std::string>& names) {
  std::map<std::string, std::vector<CallSite>> sites;
  if (root == nullptr || names.empty()) return sites;
  struct Frame {
    const Value* v;
    std::string path;
  };
  std::vector<Frame> stack{{root, ""}};
  std::unordered_set<const Value*> reached;
  std::unordered_map<const Value*, std::string> key_components;  // a key node the memo shares is spelled once
  uint64_t visits = 0;
  auto child = [](const std::string& path, const std::string& component) {
    if (path.size() >= kMaxCallSitePathBytes) return path;  // already ends in "..."
    std::string out = path.empty() ? component : path + "/" + component;
    if (out.size() <= kMaxCallSitePathBytes) return out;
    // Cut to the cap, the last three bytes "...": a new string of the cut's size.
    std::string cut(std::string_view(out).substr(0, kMaxCallSitePathBytes - 3));
    cut.append("...", 3);
    return cut;
  };
  auto key_component = [&](const Value& k) -> const std::string& {
    auto [it, fresh] = key_components.try_emplace(&k);
    if (!fresh) return it->second;
    try {
      it->second = k.kind == ValueKind::kStr && k.text.size() > kMaxCallSitePathBytes
                       ? EncodeKeyComponent(k.text.substr(0, kMaxCallSitePathBytes))
                       : EncodeKeyComponent(KeyComponentText(k));
    } catch (const Error&) {
      it->second = "?";  // a key too deep or too long to spell: its subtree is still searched
    }
    return it->second;
  };
  while (!stack.empty() && visits++ < kMaxCallSiteVisits) {
    Frame f = std::move(stack.back());
    stack.pop_back();
    if (!reached.insert(f.v).second) continue;
    const Value& v = *f.v;
    if ((v.kind == ValueKind::kObject || v.kind == ValueKind::kGlobal) && names.count(v.type_name)) {
      sites[v.type_name].push_back({f.path, CallText(v)});
    }
    std::vector<Frame> children;
    switch (v.kind) {
      case ValueKind::kDict: {
        auto entries = [&](const Value& dict, const std::string& prefix) {
          for (const auto& [k, val] : dict.entries) {
            if (reached.count(val)) continue;
            children.push_back({val, child(f.path, prefix + key_component(*k))});
          }
        };
        entries(v, "");
        if (HasAttributes(v)) entries(*v.state, "%attr:");
        break;
      }
      case ValueKind::kList: case ValueKind::kTuple: case ValueKind::kSet: case ValueKind::kFrozenSet:
        for (size_t i = 0; i < v.items.size(); ++i) children.push_back({v.items[i], child(f.path, std::to_string(i))});
        break;
      case ValueKind::kObject:
        try {
          for (const ObjectPart& p : ObjectParts(v)) {
            children.push_back({p.node, p.transparent ? f.path : child(f.path, p.component)});
          }
        } catch (const Error&) {
          // A key too deep or too long to spell: the parts are still searched, looked through.
          children.clear();
          if (v.state) children.push_back({v.state, f.path});
          if (v.args) children.push_back({v.args, f.path});
          for (const auto& e : v.entries) children.push_back({e.second, f.path});
          for (const Value* item : v.items) children.push_back({item, f.path});
        }
        break;
      default: break;
    }
    for (auto it = children.rbegin(); it != children.rend(); ++it) stack.push_back(std::move(*it));
  }
  return sites;
}

}  // namespace

bool LooksLikePickle(const uint8_t* data, uint64_t size) {
  return size >= 3 && data[0] == 0x80 && data[1] >= 2 && data[1] <= 5;
}

bool LooksLikeAnyPickle(const uint8_t* data, uint64_t size) {
  if (LooksLikePickle(data, size)) return true;
  // The opcodes a protocol 0 or 1 pickle can start with: a mark, an empty container, a global or
  // an instance, a scalar, a persistent id. Anything else (text, other binaries) is no pickle.
  static constexpr std::string_view kOpeners = "()]}ciILFSVNKJMGTUXPQ\x88\x89";
  if (size < 2 || kOpeners.find(static_cast<char>(data[0])) == std::string_view::npos) return false;
  CheckReport trial;
  DataResolver inert(PicklePolicy::kPermissive);
  const PickleScan scan = ScanPickle(trial, "", data, size, inert);
  return scan.readable || !trial.globals.empty();
}


PickleScan ScanPickle(CheckReport& report, const std::string& entry, const uint8_t* data, uint64_t size,
                      PickleResolver& inner, uint64_t base, int nesting) {
  ValueArena arena;
  ScanResolver resolver(inner);
  Unpickler u(data, size, arena, resolver, base);
  PickleScan scan;
  Value* root = nullptr;
  try {
    root = u.Load();
  } catch (const Error& e) {
    scan.readable = false;
    report.AddError(Severity::kMedium, entry, e, "pickle not fully readable: ");
  }
  scan.consumed = u.consumed();
  // The classes the pickle made instances of (inert objects, dict subclasses), wherever it named
  // them (a pickle may name a class in an argument and have copyreg make it).
  std::unordered_set<std::string> objects, dicts;
  arena.ForEachValue([&](Value& v) {
    if (v.kind == ValueKind::kObject && v.unknown_class) objects.insert(v.type_name);
    // A defaultdict calls its factory for every missing key: a factory that is no data
    // constructor left the defaultdict an inert object and is itself a callable the pickle uses.
    if (v.kind == ValueKind::kObject && v.unknown_class && v.type_name == "collections.defaultdict" && v.args &&
        !v.args->items.empty() && v.args->items[0]->kind == ValueKind::kGlobal) {
      objects.insert(v.args->items[0]->type_name);
    }
    if (v.kind == ValueKind::kDict) dicts.insert(v.type_name);
  });
  std::set<std::string> refused;
  for (const auto& g : u.globals()) {
    if (!g.allowed && g.via == PickleGlobalVia::kName) refused.insert(GlobalText(g));
  }
  // The k-th finding of a name is placed at the k-th place the tree uses it: its key path and the
  // call with its arguments, what the pickle would run.
  std::map<std::string, std::vector<CallSite>> sites;
  try {
    sites = CallSites(root, refused);
  } catch (const Error&) {
    // Placing findings is best effort: the findings themselves stand.
  }
  std::map<std::string, size_t> placed;
  for (const auto& g : u.globals()) {
    std::string dotted = GlobalText(g);
    const bool as_dict = dicts.count(dotted) > 0 && objects.count(dotted) == 0;
    const bool made = objects.count(dotted) > 0 || as_dict;
    report.globals.push_back({entry, dotted, g.offset, g.allowed, std::string(PolicyClass(g, ClassifyGlobal(dotted), made))});
    if (g.allowed) continue;
    Finding f = GlobalFinding(entry, g, dotted, made, as_dict);
    if (auto it = sites.find(dotted); it != sites.end() && g.via == PickleGlobalVia::kName) {
      size_t& k = placed[dotted];
      if (k < it->second.size()) {
        f.key_path = it->second[k].key_path;
        f.call = it->second[k].call;
      }
      ++k;
    }
    report.findings.push_back(std::move(f));
  }
  if (!u.lexical_stop().empty()) {
    report.Add(Severity::kMedium, entry, 0,
               "names past this point are not listed: the lexical pass over the rest of the pickle stopped " +
                   u.lexical_stop());
  }
  for (const auto& n : resolver.notes) report.Add(n.severity, entry, 0, n.message);
  report.entries_checked++;
  report.bytes_checked += size;
  if (root == nullptr) return scan;
  // Bytes that are themselves a pickle: pickle.loads(b"...") in a __reduce__ runs them in Python.
  try {
    ForEachLeaf(root, [&](const std::string& key, const Value& leaf) {
      if (leaf.kind != ValueKind::kBytes) return;
      const auto* bytes = reinterpret_cast<const uint8_t*>(leaf.text.data());
      if (!LooksLikePickle(bytes, leaf.text.size())) return;
      const std::string nested = entry + " > nested pickle at '" + key + "'";
      if (nesting + 1 > kMaxNestedPickleDepth) {
        report.Add(Severity::kHigh, nested, 0,
                                   "pickles nested deeper than kMaxNestedPickleDepth (" +
                                       std::to_string(kMaxNestedPickleDepth) + "): not scanned",
                                   key);
        return;
      }
      report.Add(Severity::kMedium, entry, 0,
                                 "bytes at '" + key + "' hold a nested pickle (protocol " + std::to_string(bytes[1]) +
                                     "); scanned as '" + nested + "'",
                                 key);
      // pickle.loads of plain bytes has no persistent ids: the plain data resolver reads it.
      DataResolver plain(PicklePolicy::kPermissive);
      ScanPickle(report, nested, bytes, leaf.text.size(), plain, 0, nesting + 1);
    });
  } catch (const Error& e) {
    report.AddError(Severity::kMedium, entry, e, "value tree not fully walked: ");
  }
  return scan;
}

}  // namespace trove
