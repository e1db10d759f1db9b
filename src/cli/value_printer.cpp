#include "cli/value_printer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include "cli/table.h"
#include "core/display_escape.h"
#include "core/float_text.h"
#include "core/utf8.h"
#include "trove/document.h"

namespace trove::cli {
namespace {

// Python's repr of a str, or of bytes (`bytes`: every byte past ASCII escaped), in the display
// notation (core/display_escape.h), cut after max_chars bytes of the text (at a character's start).
std::string Quote(const std::string& s, size_t max_chars, bool bytes = false) {
  const size_t cut = bytes ? std::min(s.size(), max_chars) : utf8::CutLength(s, max_chars);
  std::string out = "'";
  AppendEscapedForDisplay(std::string_view(s).substr(0, cut), out, bytes ? DisplayEscape::kBytes : DisplayEscape::kName, '\'');
  return out + (cut < s.size() ? "...'" : "'");
}

// A class name from the file, escaped.
std::string TypeName(const Value& v) { return EscapeForDisplay(v.type_name); }

std::string TypeLabel(const Value& v) {
  if (!v.type_name.empty() && v.type_name != "dict" && v.type_name != "bytes") return TypeName(v);
  return std::string(KindName(v.kind));
}

std::string TensorSummary(const TensorView& t) {
  return std::string(Name(t.dtype)) + ShapeString(t.shape);
}

// Scalars and containers of scalars fit on one line.
bool IsInline(const Value& v) {
  if (v.kind == ValueKind::kTensor) return false;
  if (StandsFor(v)) return true;
  if (!v.is_container()) return v.kind != ValueKind::kObject || v.args == nullptr;
  if (v.kind == ValueKind::kDict) return false;
  if (v.items.size() > 8) return false;
  for (const Value* i : v.items)
    if (i->is_container() || i->kind == ValueKind::kTensor || i->kind == ValueKind::kObject) return false;
  return true;
}

size_t CountTensors(const Value* v, size_t budget) {
  // Bounded count of tensor nodes below v (for summaries only).
  size_t n = 0, seen = 0;
  std::vector<const Value*> stack{v};
  while (!stack.empty() && seen < budget) {
    const Value* x = stack.back();
    stack.pop_back();
    ++seen;
    if (x->kind == ValueKind::kTensor) { ++n; continue; }
    for (const Value* i : x->items) stack.push_back(i);
    for (const auto& e : x->entries) stack.push_back(e.second);
    if (x->kind == ValueKind::kObject) {
      if (x->args) stack.push_back(x->args);
      if (x->state) stack.push_back(x->state);
    }
  }
  return n;
}

bool OnlyTensors(const Value& v) {
  if (v.kind == ValueKind::kDict) {
    for (const auto& e : v.entries)
      if (e.second->kind != ValueKind::kTensor) return false;
    return true;
  }
  if (v.kind == ValueKind::kList || v.kind == ValueKind::kTuple) {
    for (const Value* i : v.items)
      if (i->kind != ValueKind::kTensor) return false;
    return true;
  }
  return false;
}

// Lines an overview gives a container at least, however many siblings share what is left.
constexpr size_t kMinSubtreeLines = 4;
// Items a summarized list shows from its start and from its end.
constexpr size_t kSummaryHeadItems = 5, kSummaryTailItems = 1;
// Items looked at to tell a list of scalars: a longer list is shown as a container.
constexpr size_t kMaxSummarizedItems = 1'000'000;

bool ScalarList(const Value& v) {
  if ((v.kind != ValueKind::kList && v.kind != ValueKind::kTuple) || v.type_name == "torch.Size") return false;
  if (v.items.size() > kMaxSummarizedItems) return false;
  for (const Value* i : v.items)
    if (i->is_container() || i->kind == ValueKind::kTensor || i->kind == ValueKind::kObject || StandsFor(*i)) return false;
  return true;
}

// "[0, 1, 2, 3, 4, ..., 75] (76 items)".
std::string ListSummary(const Value& v, int precision) {
  const bool list = v.kind == ValueKind::kList;
  std::string s = list ? "[" : "(";
  const size_t n = v.items.size();
  for (size_t i = 0; i < kSummaryHeadItems; ++i) s += ScalarText(*v.items[i], 24, precision) + ", ";
  s += "...";
  for (size_t i = n - kSummaryTailItems; i < n; ++i) s += ", " + ScalarText(*v.items[i], 24, precision);
  return s + (list ? "]" : ")") + " (" + std::to_string(n) + " items)";
}

// One-line summaries in an overview (summarize_lists): a short tuple or list of scalars, lists of
// scalars and tensors (an RNG state: Python's (version, (625 ints), None), numpy's
// ('MT19937', array, pos, has_gauss, cached)), and, as an item of a list, a dict of such values
// (an optimizer's parameter group: lr, betas, eps, weight_decay, params). The line is cut to end
// within the terminal's width (kOneLineColumns in a pipe), `room` characters of it left after
// the indent and label. None when v is not such a value.
constexpr size_t kOneLineItems = 8, kOneLineEntries = 24, kOneLineColumns = 120, kMinOneLineRoom = 40;
// What a cut line's end takes: ", ...) (24 entries)".
constexpr size_t kOneLineTail = 20;

std::string OneLineItem(const Value& item, int precision) {
  if (item.kind == ValueKind::kTensor) return "tensor " + TensorSummary(*item.tensor);
  if (ScalarList(item) && item.items.size() > kSummaryHeadItems + kSummaryTailItems + 1) return ListSummary(item, precision);
  return ScalarText(item, 24, precision);
}

bool OneLineable(const Value& item) {
  const Value& shown = StandsFor(item) ? *StandsFor(item) : item;
  return shown.kind == ValueKind::kTensor || IsInline(shown) || ScalarList(shown);
}

std::optional<std::string> OneLine(const Value& v, bool list_item, int precision, size_t room) {
  room = std::max(kMinOneLineRoom, room > kOneLineTail ? room - kOneLineTail : 0);
  std::string s;
  size_t shown = 0, total = 0;
  if ((v.kind == ValueKind::kTuple || v.kind == ValueKind::kList) && v.type_name != "torch.Size" &&
      v.items.size() <= kOneLineItems) {
    for (const Value* i : v.items)
      if (!OneLineable(*i)) return std::nullopt;
    total = v.items.size();
    s = v.kind == ValueKind::kList ? "[" : "(";
    for (const Value* i : v.items) {
      const Value& x = StandsFor(*i) ? *StandsFor(*i) : *i;
      std::string item = (shown ? ", " : "") + OneLineItem(x, precision);
      // A long list that does not fit says what it is instead ("tuple of 625").
      if (s.size() + item.size() > room && x.is_container()) {
        item = (shown ? ", " : "") + TypeLabel(x) + " of " + std::to_string(x.items.size());
      }
      if (shown > 0 && s.size() + item.size() > room) break;
      s += item;
      ++shown;
    }
    if (shown < total) s += ", ...";
    return s + (v.kind == ValueKind::kList ? "]" : ")") + (shown < total ? " (" + std::to_string(total) + " items)" : "");
  }
  if (list_item && v.kind == ValueKind::kDict && !v.entries.empty() && v.entries.size() <= kOneLineEntries &&
      !HasNonStrKeys(v)) {
    for (const auto& e : v.entries)
      if (!OneLineable(*e.second)) return std::nullopt;
    total = v.entries.size();
    s = "{";
    for (const auto& [k, val] : v.entries) {
      const std::string entry = (shown ? ", " : "") + EscapeForDisplay(k->text) + ": " +
                                OneLineItem(StandsFor(*val) ? *StandsFor(*val) : *val, precision);
      if (shown > 0 && s.size() + entry.size() > room) break;
      s += entry;
      ++shown;
    }
    if (shown < total) s += ", ...";
    return s + "}" + (shown < total ? " (" + std::to_string(total) + " entries)" : "");
  }
  return std::nullopt;
}

// The levels below the root that DescribeValues shows containers' contents at (0: all).
thread_local int tls_max_depth = 0;

void Describe(const Value* v, const std::string& label, int depth, std::vector<std::string>& out, size_t max_lines,
              bool summarize_lists, int precision, bool list_item = false) {
  if (out.size() >= max_lines) return;
  if (const Value* inner = StandsFor(*v)) v = inner;
  std::string indent(static_cast<size_t>(depth) * 2, ' ');
  std::string head = indent + (label.empty() ? "" : EscapeForDisplay(label) + ": ");
  if (depth >= kMaxPrintDepth) {
    out.push_back(head + "...");
    return;
  }
  if (v->kind == ValueKind::kTensor) {
    out.push_back(head + "tensor " + TensorSummary(*v->tensor));
    return;
  }
  if (IsInline(*v)) {
    out.push_back(head + ScalarText(*v, 80, precision));
    return;
  }
  if (summarize_lists && v->items.size() > kSummaryHeadItems + kSummaryTailItems + 1 && ScalarList(*v)) {
    out.push_back(head + ListSummary(*v, precision));
    return;
  }
  if (summarize_lists) {
    const size_t columns = TerminalColumns() > 0 ? TerminalColumns() : kOneLineColumns;
    // info indents the values by 2 more columns.
    const size_t used = head.size() + 2;
    if (std::optional<std::string> line = OneLine(*v, list_item, precision, columns > used ? columns - used : 0)) {
      out.push_back(head + *line);
      return;
    }
  }
  if (v->kind == ValueKind::kObject) {
    out.push_back(head + "<" + TypeName(*v) + ">");
    if (v->args) Describe(v->args, "args", depth + 1, out, max_lines, summarize_lists, precision);
    if (v->state) Describe(v->state, "state", depth + 1, out, max_lines, summarize_lists, precision);
    return;
  }
  size_t count = v->kind == ValueKind::kDict ? v->entries.size() : v->items.size();
  std::string summary = head + TypeLabel(*v) + " of " + std::to_string(count);
  if (OnlyTensors(*v)) {
    out.push_back(summary + " tensors");
    return;
  }
  size_t tensors = CountTensors(v, 100000);
  out.push_back(summary + (tensors ? " (" + std::to_string(tensors) + " tensors inside)" : ""));
  if (tls_max_depth > 0 && depth >= tls_max_depth) return;  // --depth: deeper contents not shown
  if (v->kind == ValueKind::kDict) {
    size_t skipped = 0;
    // Scalars first (epoch, step, a learning rate), then containers without tensors (a config,
    // hyperparameters), then the rest: the short facts a person looks for are never cut off by
    // a long subtree of weights or optimizer state before them.
    // Bounded: the first kReorderedEntries entries are ranked, each by a look at no more than
    // kRankNodes nodes; later entries keep their order, after them.
    constexpr size_t kReorderedEntries = 4096, kRankNodes = 64;
    std::vector<uint8_t> ranks(std::min(v->entries.size(), kReorderedEntries));
    for (size_t i = 0; i < ranks.size(); ++i) {
      const Value& e = *v->entries[i].second;
      const Value* shown = StandsFor(e) ? StandsFor(e) : &e;
      ranks[i] = IsInline(*shown) ? 0 : CountTensors(shown, kRankNodes) == 0 ? 1 : 2;
    }
    const std::vector<std::string> components = HasNonStrKeys(*v) ? DictKeyComponents(*v) : std::vector<std::string>{};
    // In an overview each container gets its share of the lines left, so that one long subtree
    // (Lightning's loop state) does not hide its siblings (the hyperparameters); a subtree cut
    // short ends in "...".
    size_t containers_left = 0;
    for (size_t i = 0; i < v->entries.size(); ++i) {
      containers_left += v->entries[i].second->kind != ValueKind::kTensor && (i < ranks.size() ? ranks[i] : 2) > 0;
    }
    for (int pass = 0; pass < 3; ++pass) {
      for (size_t i = 0; i < v->entries.size(); ++i) {
        const auto& [k, val] = v->entries[i];
        if (val->kind == ValueKind::kTensor) {
          skipped += pass == 0;
          continue;
        }
        if ((i < ranks.size() ? ranks[i] : 2) != pass) continue;
        if (out.size() >= max_lines) return;
        size_t limit = max_lines;
        if (summarize_lists && pass > 0 && containers_left > 1) {
          limit = std::min(max_lines, out.size() + std::max(kMinSubtreeLines, (max_lines - out.size()) / containers_left));
        }
        if (pass > 0) --containers_left;
        Describe(val, components.empty() ? EncodeKeyComponent(k->text) : components[i], depth + 1, out, limit,
                 summarize_lists, precision);
        if (limit < max_lines && out.size() >= limit) out.push_back(indent + "    ...");
      }
    }
    if (skipped && out.size() < max_lines) out.push_back(indent + "  (" + std::to_string(skipped) + (skipped == 1 ? " tensor)" : " tensors)"));
  } else {
    size_t skipped = 0;
    for (size_t i = 0; i < v->items.size(); ++i) {
      if (v->items[i]->kind == ValueKind::kTensor) { ++skipped; continue; }
      if (out.size() >= max_lines) return;
      Describe(v->items[i], std::to_string(i), depth + 1, out, max_lines, summarize_lists, precision, /*list_item=*/true);
    }
    if (skipped && out.size() < max_lines) out.push_back(indent + "  (" + std::to_string(skipped) + (skipped == 1 ? " tensor)" : " tensors)"));
  }
  if (v->state && out.size() < max_lines) Describe(v->state, "attributes", depth + 1, out, max_lines, summarize_lists, precision);
}

}  // namespace

std::string ScalarText(const Value& wrapped, size_t max_chars, int precision) {
  // A wrapper shows the value it stands for; wrappers of wrappers unwind in a loop.
  const Value* shown = &wrapped;
  for (int hops = 0; const Value* inner = StandsFor(*shown); ++hops) {
    if (hops == kMaxPrintDepth) return "...";
    shown = inner;
  }
  const Value& v = *shown;
  switch (v.kind) {
    case ValueKind::kNone: return "None";
    case ValueKind::kBool: return v.boolean ? "True" : "False";
    case ValueKind::kInt: return v.IntToString();
    case ValueKind::kFloat: return precision > 0 ? RoundedFloatText(v.real, precision) : FloatText(v.real);
    case ValueKind::kComplex: return ComplexText(v.real, v.imag);
    case ValueKind::kStr: return Quote(v.text, max_chars);
    case ValueKind::kBytes: {
      // b'\x00\x01' as Python shows it; a long one cut, with its length.
      std::string text = "b" + Quote(v.text, max_chars, true);
      if (v.text.size() > max_chars) text += " (" + std::to_string(v.text.size()) + " bytes)";
      return v.type_name == "bytearray" ? "bytearray(" + text + ")" : text;
    }
    case ValueKind::kGlobal: return TypeName(v);
    case ValueKind::kTensor: return "tensor " + TensorSummary(*v.tensor);
    case ValueKind::kObject: return "<" + TypeName(v) + ">";
    case ValueKind::kList: case ValueKind::kTuple: case ValueKind::kSet: case ValueKind::kFrozenSet: {
      if (v.kind == ValueKind::kTuple && v.type_name == "torch.Size") {
        std::string s = "torch.Size([";
        for (size_t i = 0; i < v.items.size(); ++i) s += (i ? ", " : "") + ScalarText(*v.items[i], max_chars, precision);
        return s + "])";
      }
      const char* open = v.kind == ValueKind::kList ? "[" : v.kind == ValueKind::kTuple ? "(" : "{";
      const char* close = v.kind == ValueKind::kList ? "]" : v.kind == ValueKind::kTuple ? ")" : "}";
      std::string s = open;
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) s += ", ";
        if (s.size() > max_chars) { s += "..."; break; }
        const Value& item = *v.items[i];
        s += item.is_container() ? std::string(KindName(item.kind)) + "(...)" : ScalarText(item, max_chars, precision);
      }
      if (v.kind == ValueKind::kTuple && v.items.size() == 1) s += ",";
      return s + close;
    }
    case ValueKind::kDict: return TypeLabel(v) + " of " + std::to_string(v.entries.size());
  }
  return "?";
}

std::vector<std::string> DescribeValues(const Value* root, size_t max_lines, bool summarize_lists, int precision,
                                        int max_depth) {
  tls_max_depth = max_depth;
  std::vector<std::string> out;
  if (root) Describe(root, "", 0, out, max_lines, summarize_lists, precision);
  if (out.size() >= max_lines) out.push_back("...");
  return out;
}

}  // namespace trove::cli
