// GGUF's verify and scan findings: what reading accepts but a loader should hear of, and the Jinja
// code metadata carries (a chat template is rendered by the loader: CVE-2024-34359).
#include <algorithm>
#include <set>

#include "formats/gguf/gguf_format.h"
#include "formats/gguf/gguf_layout.h"
#include "trove/error.h"

namespace trove {
namespace {

using gguf::GgufLayout;
using gguf::MetadataEntry;
using gguf::TensorInfo;
using gguf::ValueType;

std::optional<GgufLayout> ParseOrReport(const MappedFile& file, CheckReport& report) {
  try {
    return gguf::ParseGguf(file.data(), file.size());
  } catch (const Error& e) {
    report.AddError(Severity::kMedium, "", e, "not readable: ");
    return std::nullopt;
  }
}

bool LooksLikeJinja(std::string_view s) {
  return s.find("{{") != std::string_view::npos || s.find("{%") != std::string_view::npos;
}

bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdent(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Names chat templates never need, each a way out of Jinja's sandbox or into the host: the
// globals and helpers that lead to Python objects (cycler, joiner, lipsum, namespace's
// attributes, self, config, request, url_for), and module and function names of escapes.
const std::set<std::string_view>& DeniedNames() {
  static const std::set<std::string_view> names{
      "cycler", "joiner", "lipsum", "url_for", "self", "config", "request", "getattr", "setattr",
      "import", "os", "popen", "subprocess", "system", "eval", "exec", "compile", "open", "globals",
      "builtins", "mro", "subclasses", "attr", "func_globals", "get_flashed_messages"};
  return names;
}

// What a template's code (inside {{ }} and {% %}; the text around it is output, not code)
// reaches that chat templates do not: each distinct construct once, in order of appearance.
std::vector<std::string> SuspiciousConstructs(std::string_view t) {
  std::vector<std::string> found;
  auto note = [&](std::string what) {
    if (std::find(found.begin(), found.end(), what) == found.end()) found.push_back(std::move(what));
  };
  size_t i = 0;
  while (i < t.size()) {
    const size_t open = t.find('{', i);
    if (open == std::string_view::npos || open + 1 >= t.size()) break;
    const char kind = t[open + 1];
    if (kind != '{' && kind != '%') { i = open + 1; continue; }
    const std::string_view close = kind == '{' ? "}}" : "%}";
    size_t end = t.find(close, open + 2);
    if (end == std::string_view::npos) end = t.size();
    const std::string_view code = t.substr(open + 2, end - open - 2);
    for (size_t p = 0; p < code.size();) {
      const char c = code[p];
      if (c == '\'' || c == '"') {  // a literal: what it spells matters only as an attribute name
        size_t q = p + 1;
        while (q < code.size() && code[q] != c) q += code[q] == '\\' ? 2 : 1;
        const std::string_view lit = code.substr(p + 1, std::min(q, code.size()) - p - 1);
        if (lit.find("__") != std::string_view::npos) note("'" + std::string(lit.substr(0, 40)) + "' (a dunder name in a string)");
        p = q + 1;
        continue;
      }
      if (IsIdentStart(c) && (p == 0 || !IsIdent(code[p - 1]))) {
        size_t q = p;
        while (q < code.size() && IsIdent(code[q])) ++q;
        const std::string_view name = code.substr(p, q - p);
        size_t r = q;
        while (r < code.size() && code[r] == ' ') ++r;
        const bool attribute_follows = r < code.size() && code[r] == '.';
        if (name.starts_with("__")) note(std::string(name) + " (a dunder attribute)");
        else if (name == "namespace" && attribute_follows) note("namespace.<attribute>");
        else if (DeniedNames().count(name)) note(std::string(name));
        p = q;
        continue;
      }
      ++p;
    }
    i = end + 2;
  }
  return found;
}

}  // namespace

void VerifyGguf(const MappedFile& file, CheckReport& report) {
  // A verify hook is the whole check of the file (ops reads nothing more): the parse is the read.
  const std::optional<GgufLayout> parsed = ParseOrReport(file, report);
  if (!parsed) return;
  const GgufLayout& g = *parsed;
  report.entries_checked += g.metadata.size() + g.tensors.size();
  report.bytes_checked += file.size();
  report.bytes_without_checksum += file.size();  // GGUF records no checksum
  if (g.draft) report.Add(Severity::kInfo, "", 0, "the July 2023 draft layout (typed fields, magic FUGG): no loader of today reads it");
  else if (g.magic == "FUGG") report.Add(Severity::kInfo, "", 0, "magic \"FUGG\": GGUF v1's byte-swapped magic, which ggml no longer reads");
  if (g.version < 3) report.Add(Severity::kInfo, "", 4, "GGUF version " + std::to_string(g.version) + " (ggml writes 3)");
  for (const MetadataEntry& e : g.metadata) {
    if (e.value.type == ValueType::kObject || e.value.elements_as_keys) {
      report.Add(Severity::kMedium, std::string(e.key), e.value.offset,
                 "an object, or an array whose elements are keys of their own (an experiment of gguf-py's writer in 2024, value type 13, in no specification): ggml refuses the file");
    }
  }
  const MetadataEntry* arch = g.Find("general.architecture");
  // A split model's parts after the first hold only split.* keys (llama.cpp's gguf-split); the
  // first holds the model's (reading the set checks that the parts belong together).
  const MetadataEntry* split_no = g.Find("split.no");
  const bool later_part = split_no != nullptr && split_no->value.type == ValueType::kU16 && split_no->value.u > 0;
  if (!later_part && (arch == nullptr || arch->value.type != ValueType::kString)) {
    report.Add(Severity::kMedium, "", 0, "no general.architecture string (the specification requires one)");
  }
  const bool quantized = std::any_of(g.tensors.begin(), g.tensors.end(), [](const TensorInfo& t) { return t.type->quantized(); });
  if (quantized && !later_part && g.Find("general.quantization_version") == nullptr) {
    report.Add(Severity::kMedium, "", 0, "quantized tensors without general.quantization_version (the specification requires it)");
  }
  // Between tensors and after the last one: only padding to the alignment is expected.
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : g.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  uint64_t at = 0;  // in the data section
  for (const TensorInfo* t : by_offset) {
    const uint64_t padded = (at + g.alignment - 1) / g.alignment * g.alignment;
    if (t->offset > padded) {
      report.Add(Severity::kMedium, std::string(t->name), g.data_offset + at,
                 std::to_string(t->offset - padded) + " unused bytes before this tensor's data (no tensor holds them)");
    }
    at = std::max(at, t->offset + t->bytes);
  }
  const uint64_t end = g.tensors.empty() ? g.infos_end : g.data_offset + at;
  const uint64_t padded_end = (end + g.alignment - 1) / g.alignment * g.alignment;
  if (file.size() > padded_end) {
    report.Add(Severity::kMedium, "", end, std::to_string(file.size() - end) + " bytes after the " +
                                               (g.tensors.empty() ? std::string("metadata") : std::string("last tensor's data")) +
                                               " that no part of the file accounts for");
  }
}

void ScanGguf(const MappedFile& file, CheckReport& report) {
  const std::optional<GgufLayout> parsed = ParseOrReport(file, report);
  report.entries_checked++;
  report.bytes_checked += file.size();
  if (!parsed) return;
  for (const MetadataEntry& e : parsed->metadata) {
    if (e.value.type != ValueType::kString) continue;
    const bool template_key = e.key.starts_with("tokenizer.chat_template");
    if (!template_key && !LooksLikeJinja(e.value.text)) continue;
    const std::vector<std::string> found = SuspiciousConstructs(e.value.text);
    if (found.empty()) continue;
    std::string list;
    for (const std::string& f : found) list += (list.empty() ? "" : ", ") + f;
    report.Add(Severity::kHigh, std::string(e.key), e.value.offset,
               "a Jinja template (rendered by the loader: llama-cpp-python's CVE-2024-34359) whose code reaches what chat "
               "templates never use: " + list);
  }
}

}  // namespace trove
