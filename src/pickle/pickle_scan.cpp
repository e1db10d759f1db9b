#include "pickle/pickle_scan.h"

#include <vector>

#include "pickle/global_class.h"
#include "trove/document.h"
#include "trove/error.h"

namespace trove {
namespace {

// Caps (reasons):
// Pickles nested as bytes inside pickles (pickle.loads(b"...")): each level is scanned by its own
// VM pass; real files have none, and three levels show the trick without letting a file
// multiply the scan's work.
constexpr int kMaxNestedPickleDepth = 3;

// A global's grade follows what its name resolves to (pickle/global_class.h): anything that runs
// code, reaches other names, loads another pickle, touches files or the network is critical,
// whatever attribute chain spells it; a name trove merely does not know is high.
Severity GlobalSeverity(const GlobalVerdict& v) {
  return v.klass == GlobalClass::kUnknown ? Severity::kHigh : Severity::kCritical;
}

// The finding for one global the unpickler listed that its resolver did not allow.
Finding GlobalFinding(const std::string& entry, const PickleGlobal& g, const std::string& dotted) {
  const std::string where = g.after_stop ? " (past where reading stopped; found by the lexical pass)" : "";
  if (g.via == PickleGlobalVia::kExtension) {
    return {Severity::kCritical, entry, g.offset,
            "copyreg extension code " + std::to_string(g.extension_code) +
                ": a global chosen at run time from the extension registry (can be any callable)" + where,
            {}};
  }
  if (g.via == PickleGlobalVia::kComputed) {
    return {Severity::kHigh, entry, g.offset,
            "STACK_GLOBAL whose module and name are computed, not literal: the global it reaches is unknown" + where,
            {}};
  }
  const GlobalVerdict v = ClassifyGlobal(dotted);
  std::string message = "global '" + dotted + "' is not in the allowlist";
  if (v.klass != GlobalClass::kUnknown) {
    message += "; it resolves to " + v.target + " (" + std::string(GlobalClassName(v.klass)) + ": " +
               std::string(GlobalClassEffect(v.klass)) + ")";
  }
  return {GlobalSeverity(v), entry, g.offset, message + where, {}};
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
    if (callable != nullptr && callable->kind != ValueKind::kGlobal) {
      notes.push_back({Severity::kMedium, "REDUCE/NEWOBJ calls a " + std::string(KindName(callable->kind)) +
                                              " value, not a named global"});
    }
    return inner_.Call(callable, args, arena);
  }
  Value* Build(Value* object, Value* state, ValueArena& arena) override {
    if (object != nullptr && object->kind == ValueKind::kGlobal) {
      notes.push_back({Severity::kHigh, "BUILD on the global '" + object->type_name +
                                            "' itself: sets attributes of a class or function (rewires it in Python)"});
    }
    return inner_.Build(object, state, arena);
  }
  Value* PersistentLoad(Value* pid, ValueArena& arena) override { return inner_.PersistentLoad(pid, arena); }
  bool permissive() const override { return inner_.permissive(); }

  struct Note {
    Severity severity;
    std::string message;
  };
  std::vector<Note> notes;

 private:
  PickleResolver& inner_;
};

}  // namespace

bool LooksLikePickle(const uint8_t* data, uint64_t size) {
  return size >= 3 && data[0] == 0x80 && data[1] >= 2 && data[1] <= 5;
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
  for (const auto& g : u.globals()) {
    std::string dotted = GlobalText(g);
    report.globals.push_back({entry, dotted, g.offset, g.allowed});
    if (!g.allowed) report.findings.push_back(GlobalFinding(entry, g, dotted));
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
      DataResolver plain(/*permissive=*/true);
      ScanPickle(report, nested, bytes, leaf.text.size(), plain, 0, nesting + 1);
    });
  } catch (const Error& e) {
    report.AddError(Severity::kMedium, entry, e, "value tree not fully walked: ");
  }
  return scan;
}

}  // namespace trove
