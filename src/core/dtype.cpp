#include "core/dtype.h"

#include <algorithm>
#include <cctype>

namespace coda {

namespace {

struct Entry {
  uint32_t id;
  DTypeInfo info;
};

// Block geometry as defined by the GGUF/ggml format (elements per block, bytes per block).
constexpr Entry kTypes[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},      {3, {"Q4_1", 32, 20}},
    {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},      {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},
    {10, {"Q2_K", 256, 84}},    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}}, {17, {"IQ2_XS", 256, 74}},
    {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},   {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},
    {22, {"IQ2_S", 256, 82}},   {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},        {29, {"IQ1_M", 256, 56}},
    {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},   {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
};

constexpr DType kSupported[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q4_0,
                                DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,   DType::Q5_K,
                                DType::Q6_K, DType::Q3_K, DType::Q2_K, DType::IQ4_NL, DType::IQ4_XS};

}  // namespace

const DTypeInfo* dtype_info(uint32_t id) {
  for (const Entry& e : kTypes)
    if (e.id == id) return &e.info;
  return nullptr;
}

bool dtype_supported(DType t) {
  return std::find(std::begin(kSupported), std::end(kSupported), t) != std::end(kSupported);
}

std::string supported_dtypes_list() {
  std::string s;
  for (DType t : kSupported) {
    if (!s.empty()) s += ' ';
    s += dtype_name(t);
  }
  return s;
}

bool dtype_from_name(const std::string& name, DType* out) {
  std::string up = name;
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const Entry& e : kTypes) {
    if (up == e.info.name) {
      *out = static_cast<DType>(e.id);
      return true;
    }
  }
  return false;
}

}  // namespace coda
