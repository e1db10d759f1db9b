// pickle/numpy_data.h: numpy's arrays and scalars in a pickle, read as trove data.
//
// numpy pickles an array as `_reconstruct(ndarray, (0,), b'b')` followed by BUILD with the state
// (version, shape, dtype, is_fortran, raw bytes), a dtype as `dtype('f4', False, True)` followed
// by BUILD with (version, byte order, subarray, names, fields, elsize, alignment, flags), a scalar
// as `scalar(dtype, raw bytes)`, and (protocol 5) a contiguous array as
// `_frombuffer(buffer, dtype, shape, order)`. These functions turn those calls into a tensor (a
// view of a copy of the raw bytes: the pickle holds them as a Python bytes object, not in place)
// whose node's type_name is "numpy.ndarray", or a number whose type_name is numpy's scalar class
// ("numpy.float32") and whose text holds its little-endian bytes, so that a reader can give back
// what numpy pickled (torch.load does). Arrays of dtypes with no tensor meaning (objects,
// strings, records, datetimes) stay inert data objects of their class. Used by DataResolver;
// pure functions over the arena.
#pragma once

#include <optional>
#include <string_view>

#include "trove/value.h"

namespace trove::numpy_data {

enum class Function : uint8_t { kReconstruct, kNdarray, kDtype, kScalar, kFromBuffer };

// numpy's names for these (numpy 1's numpy.core and numpy 2's numpy._core spellings).
std::optional<Function> Lookup(std::string_view dotted);

// The call of a numpy name: a pending array (kObject "numpy.ndarray", turned into a tensor by
// Build), a dtype object (kObject "numpy.dtype", completed by Build), a number, or a tensor; null
// when the arguments are not what numpy writes (the caller decides what that means).
Value* Call(Function name, Value* args, ValueArena& arena);
// BUILD on a numpy object: true when `object` was one (a pending array becomes a tensor in
// place, so memo references to it see the tensor; a dtype takes its state). Error(kCorrupt) when
// the state contradicts itself (a byte count that is not the shape's).
bool Build(Value* object, Value* state, ValueArena& arena);

}  // namespace trove::numpy_data
