// core/cast_runs.h: the casts of whole runs of elements, at memory speed.
//
// CastView's streams (trove convert --dtype, GGUF dequantization to a 16-bit type) convert runs
// of whole little-endian elements here: tight loops per pair of dtypes, vectorised, chosen at run
// time for the CPU (F16C/AVX2 where present, SSE2 otherwise), each bit-exact with the element
// path (StoreElement of the value) and with torch's `.to()`: round to nearest even, subnormals
// kept, NaN stays NaN. Pure functions: the worker threads call them on pieces of one run at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trove/dtype.h"

namespace trove {

// What a run's conversion did to values, counted as it converted (see CastLosses in tensor.h).
struct LossCounts {
  uint64_t overflowed = 0, underflowed = 0, sign_lost = 0;
  LossCounts& operator+=(const LossCounts& o) {
    overflowed += o.overflowed, underflowed += o.underflowed, sign_lost += o.sign_lost;
    return *this;
  }
};

// Converts n elements of `from` at `in` to `to` at `out`, counting into `losses`. Returns false,
// having done nothing, for a pair without a run (the caller converts element by element).
bool CastRun(DType from, DType to, const uint8_t* in, uint8_t* out, size_t n, LossCounts& losses);

// The float16 runs CPUs without F16C take (CastRun takes F16C's instructions where present);
// public so that tests compare both paths bit for bit on any machine.
void Float32ToHalfPortableRun(const uint8_t* in, uint8_t* out, size_t n, LossCounts& losses);
void HalfToFloat32PortableRun(const uint8_t* in, uint8_t* out, size_t n);

}  // namespace trove
