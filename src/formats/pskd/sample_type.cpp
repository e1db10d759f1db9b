// The sample-type language: parsing Presk type text into leaves with their on-disk layout.
#include <charconv>
#include <string>

#include "trove/pskd.h"

namespace trove::pskd {
namespace {

constexpr std::string_view kRealSign = "\xE2\x84\x9D";  // ℝ in UTF-8
constexpr std::string_view kEllipsisSign = "\xE2\x80\xA6";  // … in UTF-8, as the spec writes an open prefix

bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }

class TypeParser {
 public:
  explicit TypeParser(std::string_view text) : text_(text) {}

  SampleType Parse() {
    SampleType type;
    type.text = std::string(text_);
    SkipSpace();
    if (PeekWord() == "params") {
      ConsumeWord();
      SkipSpace();
      std::string_view name = ConsumeWord();
      if (name.empty()) Fail("params needs a module name");
      SkipSpace();
      if (pos_ != text_.size()) Fail("unexpected text after 'params " + std::string(name) + "'");
      type.is_params = true;
      type.params_name = std::string(name);
      return type;
    }
    type_ = &type;
    type.nodes.emplace_back();
    ParseNode(0, 0);
    SkipSpace();
    if (pos_ != text_.size()) Fail("unexpected '" + std::string(text_.substr(pos_, 1)) + "' after the type");
    type.SetEncodings(std::vector<Encoding>(type.leaves.size(), Encoding::kF64));
    return type;
  }

 private:
  [[noreturn]] void Fail(const std::string& why) const {
    FailPskd(PskdCode::kNotClosedType, "type '" + Excerpt() + "', offset " + std::to_string(pos_) + ": " + why);
  }
  std::string Excerpt() const {
    constexpr size_t kExcerptBytes = 80;  // enough to recognise a type, short enough for one line
    return text_.size() <= kExcerptBytes ? std::string(text_) : std::string(text_.substr(0, kExcerptBytes)) + "...";
  }

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) ++pos_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void Expect(char c) {
    if (!Eat(c)) {
      std::string found = "the end";
      if (pos_ < text_.size()) found = "'" + std::string(text_.substr(pos_, 1)) + "'";
      Fail("expected '" + std::string(1, c) + "', found " + found);
    }
  }
  std::string_view PeekWord() const {
    size_t end = pos_;
    if (end < text_.size() && IsIdentStart(text_[end])) {
      while (end < text_.size() && IsIdentChar(text_[end])) ++end;
    }
    return text_.substr(pos_, end - pos_);
  }
  std::string_view ConsumeWord() {
    std::string_view w = PeekWord();
    pos_ += w.size();
    return w;
  }
  bool AtEllipsis() const { return text_.substr(pos_, 3) == "..." || text_.substr(pos_, kEllipsisSign.size()) == kEllipsisSign; }

  uint64_t ParseLiteral(std::string_view what) {
    SkipSpace();
    if (AtEllipsis()) Fail("an open prefix '...' is not a closed data type");
    size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    if (start == pos_) {
      std::string_view word = PeekWord();
      if (!word.empty()) Fail("symbolic " + std::string(what) + " '" + std::string(word) + "' (it must be a literal)");
      Fail("missing " + std::string(what));
    }
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(text_.data() + start, text_.data() + pos_, value);
    if (ec != std::errc() || end != text_.data() + pos_) Fail(std::string(what) + " does not fit in 64 bits");
    return value;
  }

  // One bracket group of dimensions: [], [8], [seq: 8], [rows: 2, cols: 3].
  std::vector<Dim> ParseDims() {
    SkipSpace();
    if (!Eat('[')) Fail("missing dimensions (a scalar is written [])");
    std::vector<Dim> dims;
    if (Eat(']')) return dims;
    while (true) {
      SkipSpace();
      Dim dim;
      if (AtEllipsis()) Fail("an open prefix '...' is not a closed data type");
      std::string_view word = PeekWord();
      if (!word.empty()) {
        size_t save = pos_;
        ConsumeWord();
        if (Eat(':')) {
          dim.name = std::string(word);
        } else {
          pos_ = save;
          Fail("symbolic dimension '" + std::string(word) + "' (every dimension must be a literal)");
        }
      }
      dim.size = ParseLiteral("dimension");
      if (dims.size() >= kMaxLeafRank) Fail("more than " + std::to_string(kMaxLeafRank) + " dimensions");
      dims.push_back(std::move(dim));
      if (Eat(']')) return dims;
      Expect(',');
    }
  }

  void AddLeaf(uint32_t node, Leaf leaf) {
    if (type_->leaves.size() >= kMaxLeaves) Fail("more than " + std::to_string(kMaxLeaves) + " leaves");
    uint64_t elements = 1;
    for (const Dim& d : leaf.dims) {
      if (d.size != 0 && elements > kMaxSampleBytes / d.size) Fail("a leaf of more than 2^48 elements");
      elements *= d.size;
    }
    leaf.elements = elements;
    type_->nodes[node].is_tuple = false;
    type_->nodes[node].leaf = static_cast<uint32_t>(type_->leaves.size());
    type_->leaves.push_back(std::move(leaf));
  }

  void ParseNode(uint32_t node, uint32_t depth) {
    if (depth > kMaxTypeDepth) Fail("tuples nested more than " + std::to_string(kMaxTypeDepth) + " deep");
    SkipSpace();
    if (pos_ >= text_.size()) Fail("missing type");
    if (Eat('(')) {
      type_->nodes[node].is_tuple = true;
      if (Eat(')')) Fail("an empty tuple holds no data");
      while (true) {
        uint32_t child = static_cast<uint32_t>(type_->nodes.size());
        type_->nodes.emplace_back();
        type_->nodes[node].children.push_back(child);
        ParseNode(child, depth + 1);
        if (Eat(')')) return;
        Expect(',');
        if (Eat(')')) return;  // (T,) is a one-element tuple
      }
    }
    if (text_.substr(pos_, kRealSign.size()) == kRealSign) {
      pos_ += kRealSign.size();
      Leaf leaf;
      leaf.kind = LeafKind::kReal;
      leaf.dims = ParseDims();
      AddLeaf(node, std::move(leaf));
      return;
    }
    if (AtEllipsis()) Fail("an open prefix '...' is not a closed data type");
    std::string_view word = PeekWord();
    // ℝ's ASCII spellings, for keyboards and shells without it.
    if (word == "R" || word == "real") {
      ConsumeWord();
      ascii_spelled_ = true;
      Leaf leaf;
      leaf.kind = LeafKind::kReal;
      leaf.dims = ParseDims();
      AddLeaf(node, std::move(leaf));
      return;
    }
    if (word == "idx") {
      ConsumeWord();
      Expect('[');
      uint64_t bound = ParseLiteral("bound");
      if (bound == 0) Fail("idx[0] has no values");
      Expect(']');
      Leaf leaf;
      leaf.kind = LeafKind::kIndex;
      leaf.bound = bound;
      leaf.dims = ParseDims();
      AddLeaf(node, std::move(leaf));
      return;
    }
    if (word == "bool") {
      ConsumeWord();
      Leaf leaf;
      leaf.kind = LeafKind::kIndex;
      leaf.bound = 2;
      leaf.written_as_bool = true;
      leaf.dims = ParseDims();
      AddLeaf(node, std::move(leaf));
      return;
    }
    if (word == "params") Fail("params M is a sample type only on its own");
    if (!word.empty()) Fail("named type '" + std::string(word) + "' is not a closed data type");
    Fail("unexpected '" + std::string(text_.substr(pos_, 1)) + "'");
  }

  std::string_view text_;
  size_t pos_ = 0;
  SampleType* type_ = nullptr;

 public:
  bool ascii_spelled_ = false;  // some real leaf was written R or real
};

void AppendNodeText(const SampleType& type, uint32_t node, std::string& out) {
  const TypeNode& n = type.nodes[node];
  if (!n.is_tuple) {
    out += type.leaves[n.leaf].TypeText();
    return;
  }
  out += '(';
  for (size_t i = 0; i < n.children.size(); ++i) {
    if (i > 0) out += ", ";
    AppendNodeText(type, n.children[i], out);
  }
  if (n.children.size() == 1) out += ',';
  out += ')';
}

}  // namespace

std::string_view EncodingName(Encoding encoding) {
  switch (encoding) {
    case Encoding::kF64: return "f64";
    case Encoding::kF32: return "f32";
    case Encoding::kBF16: return "bf16";
  }
  return "?";
}

std::optional<Encoding> EncodingFromName(std::string_view name) {
  if (name == "f64") return Encoding::kF64;
  if (name == "f32") return Encoding::kF32;
  if (name == "bf16") return Encoding::kBF16;
  return std::nullopt;
}

std::string_view LeafStorageName(const Leaf& leaf) {
  if (leaf.kind == LeafKind::kReal) return EncodingName(leaf.encoding);
  switch (leaf.element_bytes) {
    case 1: return "u8";
    case 2: return "u16";
    case 4: return "u32";
    default: return "u64";
  }
}

uint32_t IndexElementBytes(uint64_t bound) {
  uint64_t top = bound - 1;
  if (top <= 0xFF) return 1;
  if (top <= 0xFFFF) return 2;
  if (top <= 0xFFFFFFFFu) return 4;
  return 8;
}

DType Leaf::dtype() const {
  if (kind == LeafKind::kIndex) {
    switch (element_bytes) {
      case 1: return DType::kUInt8;
      case 2: return DType::kUInt16;
      case 4: return DType::kUInt32;
      default: return DType::kUInt64;
    }
  }
  switch (encoding) {
    case Encoding::kF32: return DType::kFloat32;
    case Encoding::kBF16: return DType::kBFloat16;
    case Encoding::kF64: break;
  }
  return DType::kFloat64;
}

std::vector<int64_t> Leaf::shape() const {
  std::vector<int64_t> s;
  s.reserve(dims.size());
  for (const Dim& d : dims) s.push_back(static_cast<int64_t>(d.size));
  return s;
}

std::string Leaf::TypeText() const {
  std::string out;
  if (kind == LeafKind::kReal) {
    out = std::string(kRealSign);
  } else if (written_as_bool) {
    out = "bool";
  } else {
    out = "idx[" + std::to_string(bound) + "]";
  }
  out += '[';
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    if (!dims[i].name.empty()) out += dims[i].name + ": ";
    out += std::to_string(dims[i].size);
  }
  out += ']';
  return out;
}

bool SampleType::has_narrow_leaf() const {
  for (const Leaf& leaf : leaves) {
    if (leaf.encoding != Encoding::kF64) return true;
  }
  return false;
}

std::vector<Encoding> SampleType::encodings() const {
  std::vector<Encoding> out;
  out.reserve(leaves.size());
  for (const Leaf& leaf : leaves) out.push_back(leaf.encoding);
  return out;
}

void SampleType::SetEncodings(const std::vector<Encoding>& new_encodings) {
  if (is_params) FailPskd(PskdCode::kNotClosedType, "params " + params_name + ": its leaf layout needs the program");
  if (new_encodings.size() != leaves.size()) {
    FailPskd(PskdCode::kLayout, std::to_string(new_encodings.size()) + " encodings for " +
                                    std::to_string(leaves.size()) + " leaves of " + text);
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    Leaf& leaf = leaves[i];
    Encoding e = new_encodings[i];
    if (static_cast<uint8_t>(e) > 2) {
      FailPskd(PskdCode::kNotPskd, "leaf " + std::to_string(i) + ": unknown encoding " +
                                       std::to_string(static_cast<int>(e)));
    }
    if (leaf.kind == LeafKind::kIndex) {
      if (e != Encoding::kF64) {
        FailPskd(PskdCode::kLayout, "leaf " + std::to_string(i) + " (" + leaf.TypeText() + ") holds indices but is encoded " +
                                        std::string(EncodingName(e)));
      }
      leaf.element_bytes = IndexElementBytes(leaf.bound);
    } else {
      leaf.element_bytes = e == Encoding::kF64 ? 8 : e == Encoding::kF32 ? 4 : 2;
    }
    leaf.encoding = e;
    // elements <= 2^48 (parser cap) and element_bytes <= 8: the product fits in 64 bits.
    leaf.bytes = leaf.elements * leaf.element_bytes;
    leaf.offset = offset;
    if (leaf.bytes > kMaxSampleBytes - offset) {
      FailPskd(PskdCode::kNotClosedType, "a sample of " + text + " is larger than 2^48 bytes");
    }
    offset += leaf.bytes;
  }
  if (offset == 0) FailPskd(PskdCode::kNotClosedType, "a sample of " + text + " holds no bytes");
  sample_bytes = offset;
}

std::string SampleType::CanonicalText() const {
  if (is_params) return "params " + params_name;
  std::string out;
  AppendNodeText(*this, 0, out);
  return out;
}

SampleType ParseSampleType(std::string_view text) { return TypeParser(text).Parse(); }

SampleType ParseSampleTypeArgument(std::string_view text) {
  TypeParser parser(text);
  SampleType type = parser.Parse();
  if (parser.ascii_spelled_) type.text = type.CanonicalText();
  return type;
}

}  // namespace trove::pskd
