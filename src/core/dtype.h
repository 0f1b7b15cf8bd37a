// The tensor element types of the GGUF format (ggml's type ids) and their block geometry.
//
// Every type GGUF defines is listed so that a file can be parsed and its sizes checked even when
// coda cannot compute with the type; `dtype_supported` says which ones the kernels implement.
#pragma once

#include <cstdint>
#include <string>

namespace coda {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct DTypeInfo {
  const char* name;
  int64_t block_size;   // elements per block
  int64_t block_bytes;  // bytes per block
};

// Geometry of a GGUF type id, or nullptr when the id is not a type GGUF defines.
const DTypeInfo* dtype_info(uint32_t id);

// True for the types coda's kernels compute with.
bool dtype_supported(DType t);

// "F32 F16 BF16 Q8_0 Q4_0 Q4_1 ...": for error messages.
std::string supported_dtypes_list();

inline const char* dtype_name(DType t) {
  const DTypeInfo* i = dtype_info(static_cast<uint32_t>(t));
  return i != nullptr ? i->name : "unknown";
}

// Bytes of one row of `n` elements; n must be a multiple of the block size.
inline int64_t dtype_row_bytes(DType t, int64_t n) {
  const DTypeInfo* i = dtype_info(static_cast<uint32_t>(t));
  return n / i->block_size * i->block_bytes;
}

// Parses a type name such as "Q4_K" (case-insensitive); false when unknown.
bool dtype_from_name(const std::string& name, DType* out);

}  // namespace coda
