// tests/pickle/canonical_form.h: a canonical text for a Value tree, matching canonical.py's
// (the same form computed by Python on the object pickle.loads returns), so the two readers can be
// compared as strings.
//
// None N, bools T/F, ints i<decimal>, floats f<IEEE bits hex>, complex c<re>,<im>, str s<UTF-8 hex>,
// bytes b<hex>, bytearray y<hex>, tuple (..), frozenset Z{sorted}, and the mutable containers
// (list [..], dict D<type>{k:v,..}@<state>, set S{sorted}, bytearray) labelled &n at their first
// visit and written *n when met again, so sharing and cycles show. Recursive on purpose: only used
// on trees the tests build.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "trove/value.h"

namespace trove::testing {

// Lower-case hex of bytes (pickles in failure messages, strings in canonical forms).
inline std::string ToHex(const std::string& s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

class CanonicalForm {
 public:
  std::string Of(const Value* v) {
    labels_.clear();
    return Write(v);
  }

 private:
  static std::string FloatHex(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    std::string be;
    for (int i = 7; i >= 0; --i) be.push_back(static_cast<char>(u >> (8 * i)));
    return ToHex(be);
  }
  bool Labelled(const Value* v) const {
    return v->kind == ValueKind::kList || v->kind == ValueKind::kDict || v->kind == ValueKind::kSet ||
           (v->kind == ValueKind::kBytes && v->type_name == "bytearray");
  }
  std::string Join(const std::vector<Value*>& items, bool sorted) {
    std::vector<std::string> parts;
    for (const Value* x : items) parts.push_back(Write(x));
    if (sorted) std::sort(parts.begin(), parts.end());
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? "," : "") + parts[i];
    return out;
  }
  std::string Write(const Value* v) {
    std::string label;
    if (Labelled(v)) {
      auto it = labels_.find(v);
      if (it != labels_.end()) return "*" + std::to_string(it->second);
      size_t n = labels_.size();
      labels_.emplace(v, n);
      label = "&" + std::to_string(n);
    }
    switch (v->kind) {
      case ValueKind::kNone: return "N";
      case ValueKind::kBool: return v->boolean ? "T" : "F";
      case ValueKind::kInt: return "i" + v->IntToString();
      case ValueKind::kFloat: return "f" + FloatHex(v->real);
      case ValueKind::kComplex: return "c" + FloatHex(v->real) + "," + FloatHex(v->imag);
      case ValueKind::kStr: return "s" + ToHex(v->text);
      case ValueKind::kBytes: return label + (v->type_name == "bytearray" ? "y" : "b") + ToHex(v->text);
      case ValueKind::kTuple: return "(" + Join(v->items, false) + ")";
      case ValueKind::kList: return label + "[" + Join(v->items, false) + "]";
      case ValueKind::kSet: return label + "S{" + Join(v->items, true) + "}";
      case ValueKind::kFrozenSet: return "Z{" + Join(v->items, true) + "}";
      case ValueKind::kDict: {
        std::string out = label + "D" + v->type_name + "{";
        for (size_t i = 0; i < v->entries.size(); ++i) {
          out += (i ? "," : "");
          out += Write(v->entries[i].first);
          out += ":";
          out += Write(v->entries[i].second);
        }
        out += "}";
        if (v->state != nullptr) out += "@" + Write(v->state);
        return out;
      }
      case ValueKind::kGlobal: return "G" + v->type_name;
      case ValueKind::kObject: {
        std::string out = "O" + v->type_name;
        if (v->args) out += Write(v->args);
        if (v->state) out += "@" + Write(v->state);
        return out;
      }
      case ValueKind::kTensor: return "<tensor>";
    }
    return "?";
  }

  std::unordered_map<const Value*, size_t> labels_;
};

// The same form in Python, for canonical.py-style scripts (prepend to a script).
inline constexpr const char* kPythonCanonical = R"PY(
import collections, struct, sys
sys.set_int_max_str_digits(0)
sys.setrecursionlimit(100000)
def canon(obj):
    labels = {}
    def fh(x): return struct.pack('>d', x).hex()
    def w(v):
        if type(v) is memoryview: v = v.obj  # READONLY_BUFFER: trove keeps the underlying bytes
        t = type(v)
        labelled = t in (list, dict, set, bytearray, collections.OrderedDict, collections.Counter)
        label = ''
        if labelled:
            if id(v) in labels: return '*%d' % labels[id(v)]
            labels[id(v)] = len(labels)
            label = '&%d' % labels[id(v)]
        if v is None: return 'N'
        if t is bool: return 'T' if v else 'F'
        if t is int: return 'i' + str(v)
        if t is float: return 'f' + fh(v)
        if t is complex: return 'c' + fh(v.real) + ',' + fh(v.imag)
        if t is str: return 's' + v.encode('utf-8', 'surrogatepass').hex()
        if t is bytes: return 'b' + v.hex()
        if t is bytearray: return label + 'y' + v.hex()
        if t is tuple: return '(' + ','.join(w(x) for x in v) + ')'
        if t is list: return label + '[' + ','.join(w(x) for x in v) + ']'
        if t is set: return label + 'S{' + ','.join(sorted(w(x) for x in v)) + '}'
        if t is frozenset: return 'Z{' + ','.join(sorted(w(x) for x in v)) + '}'
        if isinstance(v, dict):
            name = {dict: 'dict', collections.OrderedDict: 'collections.OrderedDict',
                    collections.Counter: 'collections.Counter'}[t]
            out = label + 'D' + name + '{' + ','.join(w(k) + ':' + w(x) for k, x in v.items()) + '}'
            if t is not dict and vars(v): out += '@' + w(vars(v))
            return out
        raise TypeError(t)
    return w(obj)
)PY";

}  // namespace trove::testing
