// Validating GGUF parser. Nothing read from the file is used as a size, count or offset before it
// has been checked against the bytes that remain and against `GgufLimits`.
#include <cstring>
#include <limits>

#include "gguf/gguf.h"

namespace coda {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint32_t kDefaultAlignment = 32;

bool known_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::F64);
}

std::string quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 80)) out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
  if (s.size() > 80) out += "...";
  return out + "'";
}

}  // namespace

size_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    default:
      return 0;
  }
}

const char* gguf_type_name(GgufType t) {
  static const char* const kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "unknown";
}

std::string GgufTensor::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) {
    if (d) s += ", ";
    s += std::to_string(ne[d]);
  }
  return s + "]";
}

// A cursor over the file that fails, with a message, instead of reading past the end.
class GgufParser {
 public:
  GgufParser(const uint8_t* data, size_t size, const GgufLimits& limits) : p_(data), size_(size), lim_(limits) {}

  Status parse(GgufFile* f) {
    f->base_ = p_;
    f->size_ = size_;
    if (size_ < 24)
      return fail(
          0, "file header",
          "file is " + std::to_string(size_) + " bytes; a GGUF header needs at least 24 (magic, version, counts)");
    uint32_t magic = 0;
    CODA_RETURN_IF_ERROR(read_pod(&magic, "magic"));
    if (magic != kMagic) {
      char m[5] = {0};
      std::memcpy(m, &magic, 4);
      for (char& c : m)
        if (c != 0 && (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e)) c = '?';
      return fail(0, "magic", "expected \"GGUF\", found \"" + std::string(m, 4) + "\"; this is not a GGUF file");
    }
    CODA_RETURN_IF_ERROR(read_pod(&f->version_, "version"));
    if (f->version_ != 2 && f->version_ != 3)
      return fail(4, "version", "version " + std::to_string(f->version_) + " is not supported; supported: 2, 3");
    uint64_t n_tensors = 0;
    uint64_t n_kv = 0;
    CODA_RETURN_IF_ERROR(read_pod(&n_tensors, "tensor_count"));
    CODA_RETURN_IF_ERROR(read_pod(&n_kv, "kv_count"));
    // Each tensor info takes at least 8+1+4+8+4+8 bytes and each kv at least 8+1+4+1: a count
    // that cannot fit in the rest of the file is rejected before anything is allocated.
    const uint64_t rest = size_ - pos_;
    if (n_tensors > lim_.max_tensors || n_tensors > rest / 33)
      return fail(8, "tensor_count",
                  std::to_string(n_tensors) + " tensors cannot fit (limit " +
                      std::to_string(std::min<uint64_t>(lim_.max_tensors, rest / 33)) + " for this file size)");
    if (n_kv > lim_.max_kv || n_kv > rest / 14)
      return fail(16, "kv_count",
                  std::to_string(n_kv) + " key/value pairs cannot fit (limit " +
                      std::to_string(std::min<uint64_t>(lim_.max_kv, rest / 14)) + " for this file size)");

    for (uint64_t k = 0; k < n_kv; ++k) CODA_RETURN_IF_ERROR(parse_kv(f, k));

    if (const GgufValue* a = f->find("general.alignment")) {
      if (a->type != GgufType::U32)
        return fail(a->offset, "general.alignment",
                    std::string("type is ") + gguf_type_name(a->type) + "; it must be u32");
      if (a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > lim_.max_alignment)
        return fail(a->offset, "general.alignment",
                    "value " + std::to_string(a->u) +
                        " must be a non-zero power of two <= " + std::to_string(lim_.max_alignment));
      f->alignment_ = static_cast<uint32_t>(a->u);
    } else {
      f->alignment_ = kDefaultAlignment;
    }

    f->tensors_.reserve(n_tensors);
    for (uint64_t t = 0; t < n_tensors; ++t) CODA_RETURN_IF_ERROR(parse_tensor_info(f, t));

    const uint64_t align = f->alignment_;
    const uint64_t data_start = (pos_ + align - 1) / align * align;
    if (n_tensors > 0 && data_start > size_)
      return fail(pos_, "data section",
                  "starts at " + std::to_string(data_start) + ", beyond the file size " + std::to_string(size_));
    f->data_offset_ = data_start;
    return check_tensor_data(f);
  }

 private:
  Status fail(uint64_t offset, const std::string& field, const std::string& what) const {
    return Error("invalid GGUF: " + field + " at offset " + std::to_string(offset) + ": " + what);
  }

  Status need(uint64_t n, const std::string& field) const {
    if (n > size_ - pos_)
      return fail(pos_, field,
                  "needs " + std::to_string(n) + " bytes but only " + std::to_string(size_ - pos_) +
                      " remain in the file (truncated?)");
    return Status::Ok();
  }

  template <typename T>
  Status read_pod(T* out, const std::string& field) {
    CODA_RETURN_IF_ERROR(need(sizeof(T), field));
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status read_string(std::string_view* out, const std::string& field, uint64_t max_len) {
    const uint64_t at = pos_;
    uint64_t len = 0;
    CODA_RETURN_IF_ERROR(read_pod(&len, field + " length"));
    if (len > max_len)
      return fail(at, field, "string length " + std::to_string(len) + " exceeds the limit " + std::to_string(max_len));
    CODA_RETURN_IF_ERROR(need(len, field));
    *out = std::string_view(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

  Status parse_scalar(GgufType t, GgufValue* v, const std::string& field) {
    switch (t) {
      case GgufType::U8: {
        uint8_t x{};
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        v->u = x;
        v->i = x;
        break;
      }
      case GgufType::I8: {
        int8_t x{};
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        v->i = x;
        v->u = static_cast<uint64_t>(x);
        break;
      }
      case GgufType::U16: {
        uint16_t x{};
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        v->u = x;
        v->i = x;
        break;
      }
      case GgufType::I16: {
        int16_t x{};
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        v->i = x;
        v->u = static_cast<uint64_t>(x);
        break;
      }
      case GgufType::U32: {
        uint32_t x{};
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        v->u = x;
        v->i = x;
        break;
      }
      case GgufType::I32: {
        int32_t x{};
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        v->i = x;
        v->u = static_cast<uint64_t>(x);
        break;
      }
      case GgufType::U64: {
        uint64_t x{};
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        v->u = x;
        v->i = static_cast<int64_t>(x);
        break;
      }
      case GgufType::I64: {
        int64_t x{};
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        v->i = x;
        v->u = static_cast<uint64_t>(x);
        break;
      }
      case GgufType::F32: {
        float x{};
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        v->f = x;
        break;
      }
      case GgufType::F64: {
        double x{};
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        v->f = x;
        break;
      }
      case GgufType::BOOL: {
        const uint64_t at = pos_;
        uint8_t x = 0;
        CODA_RETURN_IF_ERROR(read_pod(&x, field));
        if (x > 1) return fail(at, field, "bool value " + std::to_string(x) + " must be 0 or 1");
        v->b = x != 0;
        break;
      }
      case GgufType::STRING:
        CODA_RETURN_IF_ERROR(read_string(&v->str, field, lim_.max_string_bytes));
        break;
      default:
        return fail(pos_, field, "internal: not a scalar type");
    }
    return Status::Ok();
  }

  Status parse_kv(GgufFile* f, uint64_t index) {
    const uint64_t at = pos_;
    std::string_view key;
    const std::string field = "key #" + std::to_string(index);
    CODA_RETURN_IF_ERROR(read_string(&key, field, lim_.max_key_bytes));
    if (key.empty()) return fail(at, field, "key is empty");
    const std::string name(key);
    if (f->kv_.count(name) != 0) return fail(at, "key " + quote(key), "duplicate key");
    GgufValue v;
    uint32_t type = 0;
    const uint64_t type_at = pos_;
    CODA_RETURN_IF_ERROR(read_pod(&type, "type of key " + quote(key)));
    if (!known_type(type))
      return fail(type_at, "type of key " + quote(key),
                  "unknown value type " + std::to_string(type) + " (valid: 0..12)");
    v.type = static_cast<GgufType>(type);
    v.offset = pos_;
    const std::string vfield = "value of " + quote(key);
    if (v.type == GgufType::ARRAY) {
      uint32_t elem = 0;
      const uint64_t elem_at = pos_;
      CODA_RETURN_IF_ERROR(read_pod(&elem, vfield + " element type"));
      if (!known_type(elem))
        return fail(elem_at, vfield, "unknown array element type " + std::to_string(elem) + " (valid: 0..12)");
      if (elem == static_cast<uint32_t>(GgufType::ARRAY))
        return fail(elem_at, vfield, "nested arrays are not supported");
      v.elem = static_cast<GgufType>(elem);
      const uint64_t count_at = pos_;
      CODA_RETURN_IF_ERROR(read_pod(&v.count, vfield + " element count"));
      if (v.count > lim_.max_array_elems)
        return fail(count_at, vfield,
                    "array of " + std::to_string(v.count) + " elements exceeds the limit " +
                        std::to_string(lim_.max_array_elems));
      if (v.elem == GgufType::STRING) {
        // Every string needs at least its 8-byte length.
        if (v.count > (size_ - pos_) / 8)
          return fail(count_at, vfield,
                      "array of " + std::to_string(v.count) + " strings cannot fit in the " +
                          std::to_string(size_ - pos_) + " bytes that remain");
        v.strings.reserve(v.count);
        for (uint64_t e = 0; e < v.count; ++e) {
          std::string_view s;
          CODA_RETURN_IF_ERROR(read_string(&s, vfield + "[" + std::to_string(e) + "]", lim_.max_string_bytes));
          v.strings.push_back(s);
        }
      } else {
        const uint64_t esz = gguf_scalar_size(v.elem);
        if (v.count > (size_ - pos_) / esz)
          return fail(count_at, vfield,
                      "array of " + std::to_string(v.count) + " x " + std::to_string(esz) + " bytes exceeds the " +
                          std::to_string(size_ - pos_) + " bytes that remain");
        v.data = p_ + pos_;
        if (v.elem == GgufType::BOOL)
          for (uint64_t e = 0; e < v.count; ++e)
            if (v.data[e] > 1) return fail(pos_ + e, vfield, "bool element " + std::to_string(e) + " is not 0 or 1");
        pos_ += v.count * esz;
      }
    } else {
      CODA_RETURN_IF_ERROR(parse_scalar(v.type, &v, vfield));
    }
    f->key_order_.push_back(name);
    f->kv_.emplace(name, std::move(v));
    return Status::Ok();
  }

  Status parse_tensor_info(GgufFile* f, uint64_t index) {
    GgufTensor t;
    t.info_offset = pos_;
    const std::string field = "tensor #" + std::to_string(index);
    std::string_view name;
    CODA_RETURN_IF_ERROR(read_string(&name, field + " name", lim_.max_name_bytes));
    if (name.empty()) return fail(t.info_offset, field, "tensor name is empty");
    t.name = std::string(name);
    const std::string tf = "tensor " + quote(name);
    if (f->tensor_index_.count(t.name) != 0) return fail(t.info_offset, tf, "duplicate tensor name");
    uint32_t n_dims = 0;
    const uint64_t dims_at = pos_;
    CODA_RETURN_IF_ERROR(read_pod(&n_dims, tf + " n_dims"));
    if (n_dims == 0 || n_dims > 4)
      return fail(dims_at, tf + " n_dims", "value " + std::to_string(n_dims) + " must be between 1 and 4");
    t.n_dims = static_cast<int>(n_dims);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t at = pos_;
      uint64_t dim = 0;
      CODA_RETURN_IF_ERROR(read_pod(&dim, tf + " dims"));
      const std::string df = tf + " dims[" + std::to_string(d) + "]";
      if (dim == 0) return fail(at, df, "value 0 is invalid; every dimension must be >= 1");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail(at, df, "value " + std::to_string(dim) + " is negative as a signed 64-bit size");
      if (n_elems > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim)
        return fail(
            at, df,
            "element count overflows 64 bits (limit " + std::to_string(std::numeric_limits<int64_t>::max()) + ")");
      n_elems *= dim;
      t.ne[d] = static_cast<int64_t>(dim);
    }
    uint32_t type = 0;
    const uint64_t type_at = pos_;
    CODA_RETURN_IF_ERROR(read_pod(&type, tf + " type"));
    const DTypeInfo* info = dtype_info(type);
    if (info == nullptr) return fail(type_at, tf + " type", "unknown tensor type " + std::to_string(type));
    t.type = static_cast<DType>(type);
    if (t.ne[0] % info->block_size != 0)
      return fail(dims_at, tf + " dims[0]",
                  "row of " + std::to_string(t.ne[0]) + " elements is not a multiple of the " + info->name +
                      " block size " + std::to_string(info->block_size));
    const uint64_t blocks = n_elems / static_cast<uint64_t>(info->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(info->block_bytes))
      return fail(dims_at, tf, "byte size overflows 64 bits");
    t.n_bytes = blocks * static_cast<uint64_t>(info->block_bytes);
    const uint64_t off_at = pos_;
    CODA_RETURN_IF_ERROR(read_pod(&t.offset, tf + " offset"));
    if (t.n_bytes > size_)
      return fail(
          off_at, tf,
          "needs " + std::to_string(t.n_bytes) + " bytes, more than the whole file (" + std::to_string(size_) + ")");
    f->tensor_index_.emplace(t.name, f->tensors_.size());
    f->tensors_.push_back(std::move(t));
    return Status::Ok();
  }

  Status check_tensor_data(GgufFile* f) {
    const uint64_t align = f->alignment_;
    const uint64_t data_size = size_ - f->data_offset_;
    uint64_t prev_end = 0;
    std::string prev_name;
    for (GgufTensor& t : f->tensors_) {
      const std::string tf = "tensor '" + t.name + "' offset";
      if (t.offset % align != 0)
        return fail(
            t.info_offset, tf,
            "data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " + std::to_string(align));
      if (t.offset < prev_end)
        return fail(t.info_offset, tf,
                    "data offset " + std::to_string(t.offset) + " overlaps or precedes tensor '" + prev_name +
                        "' which ends at " + std::to_string(prev_end) +
                        "; tensors must be stored in order without overlap");
      if (t.offset > data_size || t.n_bytes > data_size - t.offset)
        return fail(t.info_offset, tf,
                    "data [" + std::to_string(t.offset) + ", " + std::to_string(t.offset + t.n_bytes) +
                        ") extends beyond the data section of " + std::to_string(data_size) + " bytes");
      t.data = p_ + f->data_offset_ + t.offset;
      prev_end = t.offset + t.n_bytes;
      prev_name = t.name;
    }
    return Status::Ok();
  }

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  GgufLimits lim_;
};

Expected<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, const GgufLimits& limits) {
  GgufFile f;
  GgufParser parser(data, size, limits);
  CODA_RETURN_IF_ERROR(parser.parse(&f));
  return f;
}

Expected<GgufFile> GgufFile::open(const std::string& path, const GgufLimits& limits) {
  auto mapped = MappedFile::open(path);
  if (!mapped) return mapped.error();
  auto shared = std::make_shared<MappedFile>(std::move(mapped).value());
  auto parsed = parse(shared->data(), shared->size(), limits);
  if (!parsed) return Error(path + ": " + parsed.message());
  GgufFile f = std::move(parsed).value();
  f.mapping_ = std::move(shared);
  f.path_ = path;
  return f;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

bool is_signed_int(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}
bool is_unsigned_int(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}

Error type_error(const std::string& key, const GgufValue& v, const char* wanted) {
  std::string got = gguf_type_name(v.type);
  if (v.type == GgufType::ARRAY) got = std::string("array of ") + gguf_type_name(v.elem);
  return Error("GGUF key '" + key + "' has type " + got + "; expected " + wanted);
}

Error missing(const std::string& key) {
  return Error("GGUF key '" + key + "' is missing");
}

}  // namespace

Expected<uint64_t> GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(key);
  if (is_unsigned_int(v->type)) return v->u;
  if (is_signed_int(v->type)) {
    if (v->i < 0)
      return Error("GGUF key '" + key + "' is " + std::to_string(v->i) + "; expected a non-negative integer");
    return static_cast<uint64_t>(v->i);
  }
  return type_error(key, *v, "an unsigned integer");
}

Expected<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(key);
  if (is_signed_int(v->type)) return v->i;
  if (is_unsigned_int(v->type)) {
    if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Error("GGUF key '" + key + "' value " + std::to_string(v->u) + " does not fit a signed 64-bit integer");
    return static_cast<int64_t>(v->u);
  }
  return type_error(key, *v, "an integer");
}

Expected<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->type == GgufType::F32 || v->type == GgufType::F64) return v->f;
  return type_error(key, *v, "f32 or f64");
}

Expected<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->type == GgufType::BOOL) return v->b;
  return type_error(key, *v, "bool");
}

Expected<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->type == GgufType::STRING) return std::string(v->str);
  return type_error(key, *v, "string");
}

Expected<std::vector<std::string_view>> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->type == GgufType::ARRAY && v->elem == GgufType::STRING) return v->strings;
  return type_error(key, *v, "array of string");
}

Expected<std::vector<float>> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->type != GgufType::ARRAY || (v->elem != GgufType::F32 && v->elem != GgufType::F64))
    return type_error(key, *v, "array of f32");
  std::vector<float> out(v->count);
  for (uint64_t e = 0; e < v->count; ++e) {
    if (v->elem == GgufType::F32) {
      std::memcpy(&out[e], v->data + 4 * e, 4);
    } else {
      double d;
      std::memcpy(&d, v->data + 8 * e, 8);
      out[e] = static_cast<float>(d);
    }
  }
  return out;
}

Expected<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->type != GgufType::ARRAY || !(is_signed_int(v->elem) || is_unsigned_int(v->elem)))
    return type_error(key, *v, "array of integers");
  const size_t esz = gguf_scalar_size(v->elem);
  std::vector<int64_t> out(v->count);
  for (uint64_t e = 0; e < v->count; ++e) {
    const uint8_t* q = v->data + esz * e;
    switch (v->elem) {
      case GgufType::U8:
        out[e] = q[0];
        break;
      case GgufType::I8:
        out[e] = static_cast<int8_t>(q[0]);
        break;
      case GgufType::U16: {
        uint16_t x;
        std::memcpy(&x, q, 2);
        out[e] = x;
        break;
      }
      case GgufType::I16: {
        int16_t x;
        std::memcpy(&x, q, 2);
        out[e] = x;
        break;
      }
      case GgufType::U32: {
        uint32_t x;
        std::memcpy(&x, q, 4);
        out[e] = x;
        break;
      }
      case GgufType::I32: {
        int32_t x;
        std::memcpy(&x, q, 4);
        out[e] = x;
        break;
      }
      case GgufType::U64: {
        uint64_t x;
        std::memcpy(&x, q, 8);
        out[e] = static_cast<int64_t>(x);
        break;
      }
      default: {
        int64_t x;
        std::memcpy(&x, q, 8);
        out[e] = x;
        break;
      }
    }
  }
  return out;
}

}  // namespace coda
