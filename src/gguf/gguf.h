// GGUF v2/v3 reader: parses and validates a whole file before anything trusts it.
//
// Layout (little endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, then kv_count
// key/value pairs, then tensor_count tensor infos (name, n_dims, dims, type, offset), then padding
// to `general.alignment` (default 32) and the tensor data section. Every count, length, size and
// offset is checked against the file before use; a rejection names the field, its byte offset and
// the limit it broke.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace coda {

enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

const char* gguf_type_name(GgufType t);
// Bytes of one value of a numeric or bool type; 0 for STRING and ARRAY.
size_t gguf_scalar_size(GgufType t);

// Limits a reader enforces; the defaults accept every real model and reject hostile sizes.
struct GgufLimits {
  uint64_t max_tensors = 1u << 20;
  uint64_t max_kv = 1u << 20;
  uint64_t max_key_bytes = 65535;        // spec: keys are at most 65535 bytes
  uint64_t max_string_bytes = 1u << 26;  // 64 MiB: a chat template or merges entry is far less
  uint64_t max_array_elems = 1u << 26;
  uint64_t max_name_bytes = 64;  // ggml's tensor name limit
  uint32_t max_alignment = 1u << 16;
};

struct GgufValue {
  GgufType type = GgufType::U8;
  uint64_t offset = 0;  // byte offset of the value in the file, for messages
  // Scalars.
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string_view str;
  // Arrays.
  GgufType elem = GgufType::U8;
  uint64_t count = 0;
  const uint8_t* data = nullptr;          // numeric array payload (unaligned, little endian)
  std::vector<std::string_view> strings;  // string array elements
};

struct GgufTensor {
  std::string name;
  DType type = DType::F32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension, as in ggml
  uint64_t offset = 0;           // relative to the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;
  uint64_t info_offset = 0;  // where its info record starts in the file

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;
};

class GgufFile {
 public:
  // Maps and validates a file.
  static Expected<GgufFile> open(const std::string& path, const GgufLimits& limits = {});
  // Validates a buffer the caller keeps alive (fuzzing, tests).
  static Expected<GgufFile> parse(const uint8_t* data, size_t size, const GgufLimits& limits = {});

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }
  const std::string& path() const { return path_; }
  // Whether the tensor data lies in a file mapping (open) rather than a caller's buffer (parse).
  bool file_backed() const { return mapping_ != nullptr; }

  const std::vector<std::string>& keys() const { return key_order_; }
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;

  // Typed access. Integers accept any integer type whose value fits; floats accept F32/F64.
  // The error names the key, the stored type and the wanted one.
  Expected<uint64_t> get_uint(const std::string& key) const;
  Expected<int64_t> get_int(const std::string& key) const;
  Expected<double> get_float(const std::string& key) const;
  Expected<bool> get_bool(const std::string& key) const;
  Expected<std::string> get_string(const std::string& key) const;
  Expected<std::vector<std::string_view>> get_string_array(const std::string& key) const;
  Expected<std::vector<float>> get_float_array(const std::string& key) const;
  Expected<std::vector<int64_t>> get_int_array(const std::string& key) const;

 private:
  std::shared_ptr<MappedFile> mapping_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> key_order_;
  std::map<std::string, GgufValue, std::less<>> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;

  friend class GgufParser;
};

}  // namespace coda
