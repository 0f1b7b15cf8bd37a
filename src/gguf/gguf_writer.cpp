#include "gguf/gguf_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace coda {

namespace {

template <typename T>
void put(std::vector<uint8_t>* out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out->insert(out->end(), p, p + sizeof(T));
}

void put_string(std::vector<uint8_t>* out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out->insert(out->end(), s.begin(), s.end());
}

}  // namespace

void GgufWriter::set_raw(const std::string& key, GgufType type, std::vector<uint8_t> payload) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = {type, std::move(payload)};
      return;
    }
  }
  kv_.push_back({key, {type, std::move(payload)}});
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  std::vector<uint8_t> p;
  put(&p, v);
  set_raw(key, GgufType::U32, p);
}
void GgufWriter::set_i32(const std::string& key, int32_t v) {
  std::vector<uint8_t> p;
  put(&p, v);
  set_raw(key, GgufType::I32, p);
}
void GgufWriter::set_u64(const std::string& key, uint64_t v) {
  std::vector<uint8_t> p;
  put(&p, v);
  set_raw(key, GgufType::U64, p);
}
void GgufWriter::set_f32(const std::string& key, float v) {
  std::vector<uint8_t> p;
  put(&p, v);
  set_raw(key, GgufType::F32, p);
}
void GgufWriter::set_bool(const std::string& key, bool v) {
  std::vector<uint8_t> p{static_cast<uint8_t>(v ? 1 : 0)};
  set_raw(key, GgufType::BOOL, p);
}
void GgufWriter::set_string(const std::string& key, const std::string& v) {
  std::vector<uint8_t> p;
  put_string(&p, v);
  set_raw(key, GgufType::STRING, p);
}

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<uint8_t> p;
  put<uint32_t>(&p, static_cast<uint32_t>(GgufType::STRING));
  put<uint64_t>(&p, v.size());
  for (const auto& s : v) put_string(&p, s);
  set_raw(key, GgufType::ARRAY, p);
}

void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<uint8_t> p;
  put<uint32_t>(&p, static_cast<uint32_t>(GgufType::F32));
  put<uint64_t>(&p, v.size());
  for (float x : v) put(&p, x);
  set_raw(key, GgufType::ARRAY, p);
}

void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<uint8_t> p;
  put<uint32_t>(&p, static_cast<uint32_t>(GgufType::I32));
  put<uint64_t>(&p, v.size());
  for (int32_t x : v) put(&p, x);
  set_raw(key, GgufType::ARRAY, p);
}

void GgufWriter::copy_value(const std::string& key, const GgufValue& v) {
  std::vector<uint8_t> p;
  if (v.type == GgufType::ARRAY) {
    put<uint32_t>(&p, static_cast<uint32_t>(v.elem));
    put<uint64_t>(&p, v.count);
    if (v.elem == GgufType::STRING) {
      for (auto s : v.strings) put_string(&p, std::string(s));
    } else {
      p.insert(p.end(), v.data, v.data + v.count * gguf_scalar_size(v.elem));
    }
  } else if (v.type == GgufType::STRING) {
    put_string(&p, std::string(v.str));
  } else if (v.type == GgufType::F32) {
    put(&p, static_cast<float>(v.f));
  } else if (v.type == GgufType::F64) {
    put(&p, v.f);
  } else if (v.type == GgufType::BOOL) {
    p.push_back(v.b ? 1 : 0);
  } else {
    const uint64_t u = v.u;
    p.insert(p.end(), reinterpret_cast<const uint8_t*>(&u),
             reinterpret_cast<const uint8_t*>(&u) + gguf_scalar_size(v.type));
  }
  set_raw(key, v.type, p);
}

Status GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, Fill fill) {
  const DTypeInfo* info = dtype_info(static_cast<uint32_t>(type));
  if (info == nullptr) return Error("tensor '" + name + "': unknown type");
  if (ne.empty() || ne.size() > 4) return Error("tensor '" + name + "': 1 to 4 dimensions required");
  if (name.size() > 64) return Error("tensor name '" + name + "' is longer than 64 bytes");
  if (ne[0] % info->block_size != 0)
    return Error("tensor '" + name + "': row of " + std::to_string(ne[0]) + " is not a multiple of the " + info->name +
                 " block size " + std::to_string(info->block_size));
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0) return Error("tensor '" + name + "': dimensions must be >= 1");
    n *= d;
  }
  for (const auto& t : tensors_)
    if (t.name == name) return Error("tensor '" + name + "' added twice");
  tensors_.push_back(
      {name, type, ne, static_cast<uint64_t>(n / info->block_size * info->block_bytes), std::move(fill)});
  return Status::Ok();
}

Status GgufWriter::write(const std::string& path, uint32_t alignment) const {
  std::vector<uint8_t> head;
  put<uint32_t>(&head, 0x46554747u);
  put<uint32_t>(&head, 3);
  put<uint64_t>(&head, tensors_.size());
  const bool has_align = alignment != 32;
  put<uint64_t>(&head, kv_.size() + (has_align ? 1 : 0));
  for (const auto& [key, tv] : kv_) {
    put_string(&head, key);
    put<uint32_t>(&head, static_cast<uint32_t>(tv.first));
    head.insert(head.end(), tv.second.begin(), tv.second.end());
  }
  if (has_align) {
    put_string(&head, "general.alignment");
    put<uint32_t>(&head, static_cast<uint32_t>(GgufType::U32));
    put<uint32_t>(&head, alignment);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(&head, t.name);
    put<uint32_t>(&head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(&head, static_cast<uint64_t>(d));
    put<uint32_t>(&head, static_cast<uint32_t>(t.type));
    put<uint64_t>(&head, offset);
    offset += (t.n_bytes + alignment - 1) / alignment * alignment;
  }
  head.resize((head.size() + alignment - 1) / alignment * alignment, 0);

  // Written under a temporary name and renamed into place, so a reader never sees a half-written
  // file and a failed write leaves no truncated model behind.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    if (!f) return Error("cannot create '" + tmp + "': " + std::strerror(errno));
    auto failed = [&]() {
      const std::string why = std::strerror(errno);
      f.reset();
      std::remove(tmp.c_str());
      return Error("write to '" + path + "' failed: " + why);
    };
    if (std::fwrite(head.data(), 1, head.size(), f.get()) != head.size()) return failed();
    std::vector<uint8_t> buf;
    for (const auto& t : tensors_) {
      const uint64_t padded = (t.n_bytes + alignment - 1) / alignment * alignment;
      buf.assign(padded, 0);
      if (t.fill) t.fill(buf.data());
      if (std::fwrite(buf.data(), 1, buf.size(), f.get()) != buf.size()) return failed();
    }
    if (std::fflush(f.get()) != 0) return failed();
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return Error("cannot move '" + tmp + "' to '" + path + "': " + why);
  }
  return Status::Ok();
}

}  // namespace coda
