// Token ids from .npy, raw .bin and text files (formats/pskd/token_files.h).
#include "formats/pskd/token_files.h"

#include <algorithm>

#include "core/little_endian.h"
#include "formats/npy/npy_header.h"
#include "formats/pskd/text_input.h"
#include "trove/error.h"
#include "trove/pskd.h"

namespace trove::pskd {
namespace {

// Ids handed to the sink at once: 512 KiB of uint64, small next to any window buffer.
constexpr size_t kChunkIds = size_t{1} << 16;
// A token longer than this many bytes is not an index (2^64 has 20 digits).
constexpr size_t kMaxTokenBytes = 20;

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Quoted(std::string_view token) {
  constexpr size_t kShownBytes = 40;  // a message names the token, not a whole runaway line
  return "'" + std::string(token.substr(0, kShownBytes)) + (token.size() > kShownBytes ? "...'" : "'");
}

bool IsSigned(DType d) { return d == DType::kInt8 || d == DType::kInt16 || d == DType::kInt32 || d == DType::kInt64; }

bool IsTokenDType(DType d) {
  switch (d) {
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64:
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64: return true;
    default: return false;
  }
}

}  // namespace

std::optional<DType> TokenDTypeFromName(std::string_view name) {
  if (name == "uint16") return DType::kUInt16;
  if (name == "uint32") return DType::kUInt32;
  return std::nullopt;
}

struct TokenFiles::Input {
  std::string path;
  bool text = true;
  std::shared_ptr<MappedFile> file;  // binary inputs
  DType dtype = DType::kUInt16;
  uint64_t offset = 0;  // of id 0
  uint64_t count = 0;   // ids
};

TokenFiles::TokenFiles(const std::vector<std::string>& paths, std::optional<DType> bin_dtype) {
  for (const std::string& path : paths) {
    auto in = std::make_unique<Input>();
    in->path = path;
    const bool npy = EndsWith(path, ".npy"), bin = EndsWith(path, ".bin");
    if (npy || bin) {
      in->text = false;
      in->file = MappedFile::Open(path, /*keep_descriptor=*/false);
      const uint8_t* data = in->file->data();
      const uint64_t size = in->file->size();
      if (npy) {
        NpyHeader h;
        try {
          const NpyPreamble p = ReadNpyPreamble(data, std::min(size, kNpyPreambleBytes), size);
          h = ParseNpyHeader(p, std::string_view(reinterpret_cast<const char*>(data) + p.header_offset, p.header_length));
        } catch (const Error& e) {
          FailPskd(PskdCode::kNotPskd, path + ": not a .npy array of token ids: " + e.DisplayMessageWithoutSpecCode());
        }
        if (h.kind != NpyKind::kArray || !IsTokenDType(h.dtype)) {
          FailPskd(PskdCode::kBadValue, path + ": a .npy of '" + h.descr + "': token ids are an integer array "
                                        "(uint16, uint32, int32, int64)");
        }
        if (h.byte_order == ByteOrder::kBig && ElementSize(h.dtype) > 1) {
          FailPskd(PskdCode::kBadValue, path + ": a big-endian .npy ('" + h.descr + "'): save it little-endian (astype('<" +
                                            h.descr.substr(1) + "'))");
        }
        if (h.shape.size() != 1) {
          FailPskd(PskdCode::kLayout, path + ": a .npy of " + std::to_string(h.shape.size()) +
                                          " dimensions: token ids are one 1-D array (flatten it first)");
        }
        const uint64_t offset = h.preamble.data_offset();
        if (size < offset || size - offset < h.data_bytes) {
          FailPskd(PskdCode::kTruncated, path + ": truncated: " + std::to_string(h.elements) + " ids need " +
                                             std::to_string(h.data_bytes) + " bytes after the header, the file has " +
                                             std::to_string(size < offset ? 0 : size - offset));
        }
        in->dtype = h.dtype;
        in->offset = offset;
        in->count = h.elements;
      } else {
        if (!bin_dtype) {
          Fail(ErrorCode::kUsage, path + ": a raw .bin of token ids needs --token-dtype uint16 or uint32 "
                                         "(its bytes do not say which)");
        }
        const uint64_t item = ElementSize(*bin_dtype);
        if (size % item != 0) {
          FailPskd(PskdCode::kTruncated, path + ": " + std::to_string(size) + " bytes is not a whole number of " +
                                             std::string(Name(*bin_dtype)) + " ids (" + std::to_string(item) +
                                             " bytes each): a truncated file, or another --token-dtype");
        }
        in->dtype = *bin_dtype;
        in->count = size / item;
      }
    }
    inputs_.push_back(std::move(in));
  }
}

TokenFiles::~TokenFiles() = default;

void TokenFiles::ForEach(std::optional<uint64_t> vocab,
                         const std::function<void(const uint64_t*, size_t)>& sink) const {
  std::vector<uint64_t> ids;
  ids.reserve(kChunkIds);
  auto flush = [&] {
    if (!ids.empty()) sink(ids.data(), ids.size());
    ids.clear();
  };
  for (const auto& in : inputs_) {
    if (!in->text) {
      const uint32_t width = static_cast<uint32_t>(ElementSize(in->dtype));
      const bool is_signed = IsSigned(in->dtype);
      const uint8_t* base = in->file->data() + in->offset;
      for (uint64_t i = 0; i < in->count; ++i) {
        uint64_t v = LoadLe(base + i * width, width);
        if (is_signed && (v >> (8 * width - 1)) != 0) {
          const int64_t negative = width == 8 ? static_cast<int64_t>(v) : static_cast<int64_t>(v) - (int64_t{1} << (8 * width));
          FailPskd(PskdCode::kBadValue, in->path + ": id " + std::to_string(i) + " is " + std::to_string(negative) +
                                            ": not a token id");
        }
        if (vocab && v >= *vocab) {
          FailPskd(PskdCode::kBadValue, in->path + ": id " + std::to_string(i) + " is " + std::to_string(v) +
                                            ", not below --vocab " + std::to_string(*vocab));
        }
        ids.push_back(v);
        if (ids.size() == kChunkIds) flush();
      }
      continue;
    }
    TextInput text(in->path, TextInput::Cut::kWhitespace);
    uint64_t line = 1;
    for (std::string_view chunk = text.Next(); !chunk.empty(); chunk = text.Next()) {
      const char* p = chunk.data();
      const char* end = p + chunk.size();
      while (p < end) {
        const char c = *p;
        if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
          ++p;
          continue;
        }
        if (c == '\n') {
          ++line;
          ++p;
          continue;
        }
        const char* start = p;
        uint64_t value = 0;
        bool digits_only = true, overflow = false;
        while (p < end && !(*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == '\v' || *p == '\f')) {
          const unsigned d = static_cast<unsigned char>(*p) - '0';
          if (d > 9) digits_only = false;
          if (value > (~uint64_t{0} - 9) / 10) overflow = true;
          value = value * 10 + d;
          ++p;
        }
        std::string_view token(start, static_cast<size_t>(p - start));
        const std::string where = in->path + ": line " + std::to_string(line) + ": ";
        if (!digits_only) FailPskd(PskdCode::kBadValue, where + Quoted(token) + " is not an index");
        if (token.size() > kMaxTokenBytes || overflow || (vocab && value >= *vocab)) {
          FailPskd(PskdCode::kBadValue, where + (overflow || token.size() > kMaxTokenBytes ? Quoted(token) : std::to_string(value)) +
                                            " is not below " + (vocab ? std::to_string(*vocab) : std::string("2^64")));
        }
        ids.push_back(value);
        if (ids.size() == kChunkIds) flush();
      }
    }
  }
  flush();
}

uint64_t TokenFiles::MaxId() const {
  uint64_t max = 0, n = 0;
  ForEach(std::nullopt, [&](const uint64_t* ids, size_t count) {
    for (size_t i = 0; i < count; ++i) max = std::max(max, ids[i]);
    n += count;
  });
  if (n == 0) {
    FailPskd(PskdCode::kBadValue, (inputs_.size() == 1 ? inputs_[0]->path : std::string("the inputs")) +
                                      " hold no token id, so no vocabulary size can be inferred (give --vocab)");
  }
  return max;
}

}  // namespace trove::pskd
