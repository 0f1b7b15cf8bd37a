#include "model/quantize_model.h"

#include <cstring>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kernels/kernels.h"

namespace coda {

namespace {

// llama.cpp's `general.file_type` for a file whose matrices are mostly `t` (its LLAMA_FTYPE_MOSTLY_*
// numbers); -1 where there is none.
int file_type_of(DType t) {
  switch (t) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q4_1:
      return 3;
    case DType::Q5_0:
      return 8;
    case DType::Q5_1:
      return 9;
    case DType::Q8_0:
      return 7;
    case DType::Q4_K:
      return 14;  // Q4_K_S: every matrix Q4_K
    case DType::Q5_K:
      return 16;  // Q5_K_S
    case DType::Q6_K:
      return 18;
    case DType::Q2_K:
      return 10;
    case DType::Q3_K:
      return 11;  // Q3_K_S: every matrix Q3_K
    case DType::IQ4_NL:
      return 25;
    case DType::IQ4_XS:
      return 30;
    case DType::BF16:
      return 32;
    default:
      return -1;
  }
}

bool is_weight_matrix(const GgufTensor& t) {
  const std::string& n = t.name;
  const std::string suffix = ".weight";
  return t.n_dims == 2 && n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         n.find("norm") == std::string::npos;
}

}  // namespace

Expected<QuantizeReport> quantize_model_file(const std::string& in, const std::string& out, DType type,
                                             ThreadPool& pool) {
  if (!dtype_supported(type))
    return Error(std::string("cannot quantize to ") + dtype_name(type) + "; supported: " + supported_dtypes_list());
  if (in == out) return Error("the output must be another file than the input");
  auto file = GgufFile::open(in);
  if (!file) return file.error();
  const GgufFile& f = *file;
  GgufWriter w;
  for (const std::string& key : f.keys()) {
    if (key == "general.file_type") continue;
    w.copy_value(key, *f.find(key));
  }
  if (file_type_of(type) >= 0) w.set_u32("general.file_type", static_cast<uint32_t>(file_type_of(type)));
  const int64_t block = dtype_info(static_cast<uint32_t>(type))->block_size;
  QuantizeReport rep;
  for (const GgufTensor& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    rep.bytes_in += t.n_bytes;
    const bool convert = is_weight_matrix(t) && t.type != type && dtype_supported(t.type) && t.ne[0] % block == 0;
    if (!convert) {
      ++rep.copied;
      rep.bytes_out += t.n_bytes;
      const GgufTensor* src = &t;
      if (auto s = w.add_tensor(t.name, t.type, ne, [src](uint8_t* dst) { std::memcpy(dst, src->data, src->n_bytes); });
          !s.ok())
        return s.error();
      continue;
    }
    ++rep.converted;
    const int64_t cols = t.ne[0], rows = t.ne[1];
    const int64_t in_row = dtype_row_bytes(t.type, cols), out_row = dtype_row_bytes(type, cols);
    rep.bytes_out += static_cast<uint64_t>(out_row * rows);
    const GgufTensor* src = &t;
    auto fill = [src, type, cols, rows, in_row, out_row, &pool](uint8_t* dst) {
      pool.parallel_for(
          rows,
          [&](int64_t r0, int64_t r1) {
            std::vector<float> row(static_cast<size_t>(cols));
            for (int64_t r = r0; r < r1; ++r) {
              ref::dequantize_row(src->type, src->data + r * in_row, row.data(), cols);
              ref::quantize_row(type, row.data(), dst + r * out_row, cols);
            }
          },
          16);
    };
    if (auto s = w.add_tensor(t.name, type, ne, fill); !s.ok()) return s.error();
  }
  if (auto s = w.write(out, f.alignment()); !s.ok()) return s.error();
  return rep;
}

}  // namespace coda
