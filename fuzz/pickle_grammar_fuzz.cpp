// libFuzzer target for the pickle grammar: a structure-aware mutator (LLVMFuzzerCustomMutator)
// writes opcode sequences CPython's unpickler accepts, in every spelling it accepts (INT in base
// 0, signed and spaced memo indices, UNICODE / STRING / BINUNICODE names, SETITEM and APPEND on
// lists and bytearrays, BUILD slot states, EXT codes, nested containers and calls), so the
// fuzzer spends its time past the parser's front door. Each input runs through the strict and
// the permissive resolver; beyond "load or a trove::Error naming its offset", the target checks
// what the scan relies on: whatever a GLOBAL opcode names between where reading stopped and
// STOP is listed, and the lexical pass's own stop names an offset. The byte-level unpickler_fuzz
// target stays beside this one for inputs that are not pickles at all.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <random>
#include <string_view>
#include <string>
#include <vector>

#include "trove/error.h"
#include "trove/unpickler.h"

namespace {

// ---- the checks --------------------------------------------------------------------------------

// Opcode boundaries of a pickle, as far as they can be told (a prefix when the bytes are not one).
std::vector<size_t> Boundaries(std::string_view p) {
  std::vector<size_t> at;
  size_t i = 0;
  const auto line = [&](size_t from) { size_t nl = p.find('\n', from); return nl == std::string::npos ? p.size() : nl + 1; };
  const auto u = [&](size_t from, int n) -> uint64_t {
    uint64_t v = 0;
    for (int k = 0; k < n && from + k < p.size(); ++k) v |= uint64_t{static_cast<uint8_t>(p[from + k])} << (8 * k);
    return v;
  };
  while (i < p.size()) {
    at.push_back(i);
    uint8_t op = static_cast<uint8_t>(p[i]);
    size_t next;
    switch (op) {
      case 'I': case 'L': case 'F': case 'P': case 'S': case 'V': case 'g': case 'p': next = line(i + 1); break;
      case 'c': case 'i': next = line(line(i + 1)); break;
      case 'K': case 'h': case 'q': case 0x80: case 0x82: next = i + 2; break;
      case 'M': case 0x83: next = i + 3; break;
      case 'J': case 'j': case 'r': case 0x84: next = i + 5; break;
      case 'G': case 0x95: next = i + 9; break;
      case 0x8a: case 'U': case 'C': case 0x8c: next = i + 2 + u(i + 1, 1); break;
      case 0x8b: case 'T': case 'B': case 'X': next = i + 5 + u(i + 1, 4); break;
      case 0x8d: case 0x8e: case 0x96: {
        uint64_t n = u(i + 1, 8);
        next = n > p.size() ? p.size() : i + 9 + n;
        break;
      }
      default: next = i + 1;
    }
    i = next < i + 1 ? p.size() : next;
  }
  return at;
}


bool ValidUtf8Ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;  // keep the check to names it can judge alone
  }
  return true;
}

// Every GLOBAL / INST between where permissive reading stopped and STOP is listed, unless the
// lexical pass itself reported stopping before it.
void CheckListed(std::string_view p, const trove::Unpickler& u, uint64_t stop) {
  uint64_t lexical_end = UINT64_MAX;
  if (!u.lexical_stop().empty()) lexical_end = std::strtoull(u.lexical_stop().c_str() + 2, nullptr, 10) - 3;
  for (size_t b : Boundaries(p)) {
    if (b < stop) continue;
    if (b >= lexical_end || p[b] == '.') return;
    if (p[b] != 'c' && p[b] != 'i') continue;
    size_t nl1 = p.find('\n', b + 1);
    if (nl1 == std::string_view::npos) return;
    size_t nl2 = p.find('\n', nl1 + 1);
    if (nl2 == std::string_view::npos) return;
    if (!ValidUtf8Ascii(p.substr(b + 1, nl2 - b - 1))) continue;
    bool listed = false;
    for (const auto& g : u.globals()) listed |= g.offset == b + 3;
    if (!listed) __builtin_trap();
  }
}

void CheckOne(const uint8_t* data, size_t size, bool permissive) {
  trove::ValueArena arena;
  trove::DataResolver resolver(permissive ? trove::PicklePolicy::kPermissive : trove::PicklePolicy::kStrict);
  trove::Unpickler u(data, size, arena, resolver, 3);
  bool failed = false;
  uint64_t stop = 0;
  try {
    u.Load();
    if (u.consumed() > size) __builtin_trap();
  } catch (const trove::Error& e) {
    if (e.message().rfind("@ ", 0) != 0 && e.code() != trove::ErrorCode::kLimit) __builtin_trap();
    failed = true;
    if (e.message().rfind("@ ", 0) == 0) stop = std::strtoull(e.message().c_str() + 2, nullptr, 10) - 3;
  }
  if (!u.lexical_stop().empty() && u.lexical_stop().rfind("@ ", 0) != 0) __builtin_trap();
  for (const auto& g : u.globals()) {
    if (g.offset < 3 || g.offset >= size + 3) __builtin_trap();
    if (g.after_stop && !failed) __builtin_trap();  // the lexical pass runs only after a stop
  }
  if (failed && permissive && stop > 0) {
    CheckListed(std::string_view(reinterpret_cast<const char*>(data), size), u, stop);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CheckOne(data, size, false);
  CheckOne(data, size, true);
  return 0;
}

// ---- the structure-aware mutator (only in the fuzzer build) ------------------------------------
#ifndef TROVE_FUZZ_ENTRY_ONLY

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using Rng = std::minstd_rand;

size_t Pick(Rng& rng, size_t n) { return n == 0 ? 0 : rng() % n; }

std::string Le(uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

// An int in one of the spellings CPython reads.
std::string IntOp(Rng& rng) {
  static const int64_t kValues[] = {0, 1, 2, 5, 9, 16, 255, 256, 65535, 65536, -1, -2, 1000, INT32_MAX,
                                    INT32_MIN, INT64_MAX};
  int64_t v = kValues[Pick(rng, std::size(kValues))];
  std::string d = std::to_string(v);
  switch (Pick(rng, 12)) {
    case 0: return "I" + d + "\n";
    case 1: return v >= 0 ? "I+" + d + "\n" : "I" + d + "\n";
    case 2: { char b[40]; std::snprintf(b, sizeof b, "I%s0x%llx\n", v < 0 ? "-" : "", static_cast<unsigned long long>(v < 0 ? -(v + 1) + 1ull : v)); return b; }
    case 3: { char b[40]; std::snprintf(b, sizeof b, "I0%llo\n", static_cast<unsigned long long>(v < 0 ? 7 : v)); return b; }
    case 4: return "I" + d + std::string(1, '\0') + "junk\n";
    case 5: return "L" + d + "L\n";
    case 6: { char b[40]; std::snprintf(b, sizeof b, "L0x%llxL\n", static_cast<unsigned long long>(v < 0 ? 5 : v)); return b; }
    case 7: return "K" + Le(static_cast<uint64_t>(v) & 0xFF, 1);
    case 8: return "M" + Le(static_cast<uint64_t>(v) & 0xFFFF, 2);
    case 9: return "J" + Le(static_cast<uint64_t>(v), 4);
    case 10: return "\x8a\x08" + Le(static_cast<uint64_t>(v), 8);
    default: return "I1_000\n";
  }
}

// A str in one of the spellings CPython reads (the STACK_GLOBAL operands among them).
std::string StrOp(Rng& rng, const std::string& s) {
  switch (Pick(rng, 7)) {
    case 0: return "\x8c" + Le(s.size(), 1) + s;
    case 1: return "X" + Le(s.size(), 4) + s;
    case 2: return "\x8d" + Le(s.size(), 8) + s;
    case 3: return "V" + s + "\n";
    case 4: return "S'" + s + "'\n";
    case 5: return "U" + Le(s.size(), 1) + s;
    default: return "T" + Le(s.size(), 4) + s;
  }
}

std::string MemoIndexText(Rng& rng, unsigned i) {
  std::string d = std::to_string(i);
  switch (Pick(rng, 4)) {
    case 0: return d;
    case 1: return "+" + d;
    case 2: return " " + d + " ";
    default: return "00" + d;
  }
}

const char* const kModules[] = {"posix", "os", "builtins", "collections", "torch.serialization", "numpy", "foo"};
const char* const kNames[] = {"system", "OrderedDict", "getattr", "os.system", "Bar", "set", "eval"};

// A sequence that pushes exactly one value; `depth` bounds the nesting (the mutator's own).
std::string Value(Rng& rng, int depth) {
  if (depth <= 0) return Pick(rng, 2) ? IntOp(rng) : StrOp(rng, "s");
  switch (Pick(rng, 16)) {
    case 0: return IntOp(rng);
    case 1: return StrOp(rng, kNames[Pick(rng, std::size(kNames))]);
    case 2: return "N";
    case 3: return "(" + Value(rng, depth - 1) + Value(rng, depth - 1) + "t";
    case 4: return "](" + Value(rng, depth - 1) + Value(rng, depth - 1) + "e";
    case 5: return "}(" + StrOp(rng, "k") + Value(rng, depth - 1) + "u";
    case 6: return std::string("c") + kModules[Pick(rng, std::size(kModules))] + "\n" + kNames[Pick(rng, std::size(kNames))] + "\n";
    case 7: return StrOp(rng, kModules[Pick(rng, std::size(kModules))]) + StrOp(rng, kNames[Pick(rng, std::size(kNames))]) + "\x93";
    case 8: return Value(rng, depth - 1) + "(" + Value(rng, depth - 1) + "tR";
    case 9: return "](NNe" + IntOp(rng) + Value(rng, depth - 1) + "s";                       // SETITEM on a list
    case 10: return "\x96" + Le(1, 8) + "a" + "Kb" + "a";                                        // APPEND on a bytearray
    case 11: return Value(rng, depth - 1) + "N}\x86" "b";                                         // BUILD (None, {})
    case 12: return "\x82" + Le(Pick(rng, 256), 1);                                               // EXT1
    case 13: return Value(rng, depth - 1) + "p" + MemoIndexText(rng, static_cast<unsigned>(Pick(rng, 4))) + "\n";
    case 14: return "\x8f(" + Value(rng, depth - 1) + "\x90";
    default: return "(" + std::string("i") + kModules[Pick(rng, std::size(kModules))] + "\n" + kNames[Pick(rng, std::size(kNames))] + "\n";
  }
}

std::string Generate(Rng& rng) {
  static const char kProtos[] = {0, 2, 3, 4, 5};
  std::string p;
  char proto = kProtos[Pick(rng, std::size(kProtos))];
  if (proto != 0) p += std::string("\x80") + proto;
  size_t n = 1 + Pick(rng, 6);
  for (size_t i = 0; i < n; ++i) p += Value(rng, 1 + static_cast<int>(Pick(rng, 4))) + (i + 1 < n ? "0" : "");
  return p + ".";
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  Rng rng(seed);
  std::string p(reinterpret_cast<const char*>(data), size);
  const size_t choice = Pick(rng, 10);
  if (p.empty() || choice == 0) {
    p = Generate(rng);
  } else if (choice == 1) {
    size_t n = LLVMFuzzerMutate(data, size, max_size);  // byte-level, now and then
    return n;
  } else {
    std::vector<size_t> at = Boundaries(p);
    at.push_back(p.size());
    size_t a = at[Pick(rng, at.size())], b = at[Pick(rng, at.size())];
    if (a > b) std::swap(a, b);
    switch (choice) {
      case 2: case 3: case 4: p.insert(a, Value(rng, 1 + static_cast<int>(Pick(rng, 3))) + "0"); break;  // insert a value, popped
      case 5: p.erase(a, b - a); break;                                                               // drop a run of ops
      case 6: p.insert(b, p.substr(a, b - a)); break;                                                  // repeat a run (nesting)
      case 7: p.insert(a, std::string("(") ); p.insert(b + 1, "1"); break;                             // MARK ... POP_MARK
      case 8: p.insert(a, "cposix\nsystem\n0"); break;                                                  // a name to find
      default: p.insert(a, "\x95" + Le(static_cast<uint64_t>(p.size() - a), 8)); break;                  // FRAME
    }
    if (p.empty() || p.back() != '.') p += '.';
  }
  if (p.size() > max_size) p.resize(max_size);
  std::memcpy(data, p.data(), p.size());
  return p.size();
}

#endif  // TROVE_FUZZ_ENTRY_ONLY
