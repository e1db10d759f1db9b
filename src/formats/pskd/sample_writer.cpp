// Writing samples: the value-by-value encoder and the streaming file writer.
#include <cmath>
#include <cstring>

#include "core/float_text.h"
#include "core/little_endian.h"
#include "trove/atomic_file.h"
#include "trove/pskd.h"

namespace trove::pskd {
namespace {

std::string RealText(double v) { return FloatText(v); }

}  // namespace

SampleEncoder::SampleEncoder(const SampleType& type) : type_(&type) {
  if (type.is_params) FailPskd(PskdCode::kNotClosedType, "params " + type.params_name + ": the leaf layout needs the program");
  if (type.sample_bytes > kMaxEncodedSampleBytes) {
    Fail(ErrorCode::kLimit, "a sample of " + type.text + " is " + std::to_string(type.sample_bytes) +
                                " bytes, above the " + std::to_string(kMaxEncodedSampleBytes) +
                                " an encoder holds (kMaxEncodedSampleBytes)");
  }
  bytes_.resize(type.sample_bytes);
  for (const Leaf& leaf : type.leaves) values_per_sample_ += leaf.elements;
  Reset();
}

void SampleEncoder::Reset() {
  leaf_ = 0;
  element_ = 0;
  values_ = 0;
  // Leaves of zero elements hold no values: step over them.
  while (leaf_ < type_->leaves.size() && type_->leaves[leaf_].elements == 0) ++leaf_;
}

void SampleEncoder::Advance() {
  ++values_;
  if (++element_ == type_->leaves[leaf_].elements) {
    element_ = 0;
    ++leaf_;
    while (leaf_ < type_->leaves.size() && type_->leaves[leaf_].elements == 0) ++leaf_;
  }
}

bool SampleEncoder::next_is_index() const {
  return !complete() && type_->leaves[leaf_].kind == LeafKind::kIndex;
}

void SampleEncoder::PutIndex(uint64_t value) {
  if (complete()) FailPskd(PskdCode::kBadValue, "too many values: a sample holds " + std::to_string(values_per_sample_));
  const Leaf& leaf = type_->leaves[leaf_];
  if (leaf.kind != LeafKind::kIndex) {
    FailPskd(PskdCode::kLayout, "leaf " + std::to_string(leaf_) + " (" + leaf.TypeText() + ") holds reals, given index " +
                                    std::to_string(value));
  }
  if (value >= leaf.bound) {
    FailPskd(PskdCode::kBadValue, std::to_string(value) + " is not below " + std::to_string(leaf.bound));
  }
  StoreLe(bytes_.data() + leaf.offset + element_ * leaf.element_bytes, value, leaf.element_bytes);
  Advance();
}

void SampleEncoder::PutReal(double value) {
  if (complete()) FailPskd(PskdCode::kBadValue, "too many values: a sample holds " + std::to_string(values_per_sample_));
  const Leaf& leaf = type_->leaves[leaf_];
  if (leaf.kind != LeafKind::kReal) {
    FailPskd(PskdCode::kLayout, "leaf " + std::to_string(leaf_) + " (" + leaf.TypeText() + ") holds indices, given real " +
                                    RealText(value));
  }
  uint8_t* p = bytes_.data() + leaf.offset + element_ * leaf.element_bytes;
  switch (leaf.encoding) {
    case Encoding::kF64: {
      uint64_t bits;
      std::memcpy(&bits, &value, 8);
      StoreLe(p, bits, 8);
      break;
    }
    case Encoding::kF32:
    case Encoding::kBF16: {
      float f = static_cast<float>(value);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      const bool bf16 = leaf.encoding == Encoding::kBF16;
      // NaN has no single value to compare; it is held by every encoding.
      const bool held = std::isnan(value) || (static_cast<double>(f) == value && (!bf16 || (bits & 0xFFFFu) == 0));
      if (!held) {
        FailPskd(PskdCode::kBadValue, RealText(value) + " is not a number of " + std::string(EncodingName(leaf.encoding)));
      }
      if (bf16) {
        StoreLe(p, (bits >> 16) | (std::isnan(value) ? 0x40u : 0u), 2);  // keep NaN a NaN (quiet bit)
      } else {
        StoreLe(p, bits, 4);
      }
      break;
    }
  }
  Advance();
}

void SampleEncoder::PutStoredReal(const uint8_t* element) {
  if (complete()) FailPskd(PskdCode::kBadValue, "too many values: a sample holds " + std::to_string(values_per_sample_));
  const Leaf& leaf = type_->leaves[leaf_];
  if (leaf.kind != LeafKind::kReal) {
    FailPskd(PskdCode::kLayout, "leaf " + std::to_string(leaf_) + " (" + leaf.TypeText() + ") holds indices, given a real");
  }
  std::memcpy(bytes_.data() + leaf.offset + element_ * leaf.element_bytes, element, leaf.element_bytes);
  Advance();
}

PskdWriter::PskdWriter(const std::string& path, SampleType type, Durability durability)
    : type_(std::move(type)) {
  if (type_.is_params) FailPskd(PskdCode::kNotClosedType, "params " + type_.params_name + ": the leaf layout needs the program");
  out_ = std::make_unique<AtomicFile>(path, durability);
  std::vector<uint8_t> header = EncodeHeader(type_, 0);
  out_->Write(header.data(), header.size());
}

PskdWriter::~PskdWriter() = default;

void PskdWriter::Append(std::span<const uint8_t> sample) {
  if (sample.size() != type_.sample_bytes) {
    FailPskd(PskdCode::kLayout, "a sample of " + std::to_string(sample.size()) + " bytes for a type of " +
                                    std::to_string(type_.sample_bytes));
  }
  out_->Write(sample.data(), sample.size());
  ++count_;
}

void PskdWriter::Commit() {
  uint8_t count[8];
  StoreLe(count, count_, 8);
  out_->WriteAt(CountFieldOffset(type_), count, 8);
  out_->Commit();
}

}  // namespace trove::pskd
