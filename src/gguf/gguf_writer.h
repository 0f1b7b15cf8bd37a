// GGUF v3 writer. Metadata is held in memory; tensor data is produced by a callback at write time
// so that multi-gigabyte synthetic models never sit in memory whole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "gguf/gguf.h"

namespace coda {

class GgufWriter {
 public:
  // Fills `dst` (exactly the tensor's byte size) with the tensor's data.
  using Fill = std::function<void(uint8_t* dst)>;

  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // Copies a key/value pair from a parsed file unchanged (used to carry a vocabulary over).
  void copy_value(const std::string& key, const GgufValue& v);

  // `ne` lists dimensions with the contiguous one first, as GGUF stores them.
  Status add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, Fill fill);

  Status write(const std::string& path, uint32_t alignment = 32) const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    uint64_t n_bytes;
    Fill fill;
  };
  void set_raw(const std::string& key, GgufType type, std::vector<uint8_t> payload);

  std::vector<std::pair<std::string, std::pair<GgufType, std::vector<uint8_t>>>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace coda
