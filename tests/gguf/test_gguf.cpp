// The GGUF reader against a corpus of hand-made malformed files (one defect each), truncations
// and random mutations of a valid file, and writer/reader round trips. Built and run under
// AddressSanitizer + UndefinedBehaviorSanitizer as `test_gguf_asan`.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

namespace coda {
namespace {

// Byte-level builder, so that tests can write anything, including what the writer refuses to.
struct Raw {
  std::vector<uint8_t> b;
  Raw& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Raw& u32(uint32_t v) { return put(&v, 4); }
  Raw& u64(uint64_t v) { return put(&v, 8); }
  Raw& f32(float v) { return put(&v, 4); }
  Raw& put(const void* p, size_t n) {
    b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    return *this;
  }
  Raw& str(const std::string& s) {
    u64(s.size());
    return put(s.data(), s.size());
  }
  Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    put("GGUF", 4);
    u32(version);
    u64(n_tensors);
    return u64(n_kv);
  }
  Raw& kv_u32(const std::string& k, uint32_t v) {
    str(k);
    u32(4);
    return u32(v);
  }
  Raw& kv_str(const std::string& k, const std::string& v) {
    str(k);
    u32(8);
    return str(v);
  }
  Raw& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    u32(type);
    return u64(offset);
  }
  Raw& align(size_t a = 32) {
    b.resize((b.size() + a - 1) / a * a, 0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

Expected<GgufFile> parse(const Raw& r, const GgufLimits& lim = {}) {
  return GgufFile::parse(r.b.data(), r.b.size(), lim);
}

// A valid file: two keys, two F32 tensors of 8 elements.
Raw valid() {
  Raw r;
  r.header(2, 2).kv_str("general.architecture", "llama").kv_u32("llama.block_count", 1);
  r.tensor("a", {8}, 0, 0).tensor("b", {4, 2}, 0, 32).align().zeros(64);
  return r;
}

TEST(GgufReader, ValidFileParses) {
  const Raw r = valid();  // parse() does not copy: the bytes must outlive the GgufFile
  auto f = parse(r);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_uint("llama.block_count"), 1u);
  EXPECT_EQ(f->find_tensor("b")->ne[1], 2);
}

struct Defect {
  const char* name;
  std::function<Raw()> build;
  const char* expect;  // substring the error must contain
  GgufLimits limits = {};
};

std::vector<Defect> corpus() {
  std::vector<Defect> d;
  d.push_back({"empty file", [] { return Raw(); }, "needs at least 24"});
  d.push_back({"bad magic",
               [] {
                 Raw r = valid();
                 r.b[0] = 'X';
                 return r;
               },
               "magic at offset 0"});
  d.push_back({"version 1",
               [] {
                 Raw r;
                 r.header(0, 0, 1);
                 return r;
               },
               "version 1 is not supported; supported: 2, 3"});
  d.push_back({"version 4",
               [] {
                 Raw r;
                 r.header(0, 0, 4);
                 return r;
               },
               "version 4 is not supported"});
  d.push_back({"huge tensor count",
               [] {
                 Raw r;
                 r.header(1ull << 40, 0).zeros(64);
                 return r;
               },
               "tensor_count at offset 8"});
  d.push_back({"huge kv count",
               [] {
                 Raw r;
                 r.header(0, ~0ull).zeros(64);
                 return r;
               },
               "kv_count at offset 16"});
  d.push_back({"key length over limit",
               [] {
                 Raw r;
                 r.header(0, 1).u64(70000).zeros(64);
                 return r;
               },
               "string length 70000 exceeds the limit 65535"});
  d.push_back({"key beyond end of file",
               [] {
                 Raw r;
                 r.header(0, 1).u64(5000).zeros(16);
                 return r;
               },
               "remain in the file"});
  d.push_back({"empty key",
               [] {
                 Raw r;
                 r.header(0, 1).str("").u32(4).u32(1);
                 return r;
               },
               "key is empty"});
  d.push_back({"unknown value type",
               [] {
                 Raw r;
                 r.header(0, 1).str("k").u32(13).u32(0);
                 return r;
               },
               "unknown value type 13"});
  d.push_back({"nested array",
               [] {
                 Raw r;
                 r.header(0, 1).str("k").u32(9).u32(9).u64(1).zeros(16);
                 return r;
               },
               "nested arrays are not supported"});
  d.push_back({"array longer than file",
               [] {
                 Raw r;
                 r.header(0, 1).str("k").u32(9).u32(6).u64(1000).zeros(16);
                 return r;
               },
               "exceeds the"});
  d.push_back({"string array longer than file",
               [] {
                 Raw r;
                 r.header(0, 1).str("k").u32(9).u32(8).u64(1000).zeros(16);
                 return r;
               },
               "cannot fit"});
  d.push_back({"array over element limit",
               [] {
                 Raw r;
                 r.header(0, 1).str("k").u32(9).u32(0).u64(1ull << 30).zeros(16);
                 return r;
               },
               "exceeds the limit"});
  d.push_back({"duplicate key",
               [] {
                 Raw r;
                 r.header(0, 2).kv_u32("k", 1).kv_u32("k", 2);
                 return r;
               },
               "duplicate key"});
  d.push_back({"bool not 0/1",
               [] {
                 Raw r;
                 r.header(0, 1).str("k").u32(7).u8(2);
                 return r;
               },
               "must be 0 or 1"});
  d.push_back({"alignment not u32",
               [] {
                 Raw r;
                 r.header(0, 1).str("general.alignment").u32(10).u64(32);
                 return r;
               },
               "it must be u32"});
  d.push_back({"alignment zero",
               [] {
                 Raw r;
                 r.header(0, 1).kv_u32("general.alignment", 0);
                 return r;
               },
               "non-zero power of two"});
  d.push_back({"alignment not a power of two",
               [] {
                 Raw r;
                 r.header(0, 1).kv_u32("general.alignment", 48);
                 return r;
               },
               "value 48 must be a non-zero power of two"});
  d.push_back({"alignment too large",
               [] {
                 Raw r;
                 r.header(0, 1).kv_u32("general.alignment", 1u << 20);
                 return r;
               },
               "<= 65536"});
  d.push_back({"tensor name too long",
               [] {
                 Raw r;
                 r.header(1, 0).tensor(std::string(65, 'n'), {8}, 0, 0).align().zeros(32);
                 return r;
               },
               "exceeds the limit 64"});
  d.push_back({"empty tensor name",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("", {8}, 0, 0).align().zeros(32);
                 return r;
               },
               "tensor name is empty"});
  d.push_back({"duplicate tensor",
               [] {
                 Raw r;
                 r.header(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).align().zeros(64);
                 return r;
               },
               "duplicate tensor name"});
  d.push_back({"zero dims",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("a", {}, 0, 0).align().zeros(32);
                 return r;
               },
               "n_dims at offset 33: value 0 must be between 1 and 4"});
  d.push_back({"five dims",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("a", {1, 1, 1, 1, 1}, 0, 0).align().zeros(32);
                 return r;
               },
               "value 5 must be between 1 and 4"});
  d.push_back({"zero dimension",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("a", {8, 0}, 0, 0).align().zeros(32);
                 return r;
               },
               "dims[1] at offset"});
  d.push_back({"negative dimension",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("a", {~0ull}, 0, 0).align().zeros(32);
                 return r;
               },
               "negative as a signed 64-bit size"});
  d.push_back({"element count overflow",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("a", {1ull << 40, 1ull << 40}, 0, 0).align().zeros(32);
                 return r;
               },
               "element count overflows"});
  d.push_back({"unknown tensor type",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("a", {8}, 31, 0).align().zeros(32);
                 return r;
               },
               "unknown tensor type 31"});
  d.push_back({"row not a multiple of block",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("a", {100}, 12, 0).align().zeros(256);
                 return r;
               },
               "not a multiple of the Q4_K block size 256"});
  d.push_back({"byte size larger than file",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("a", {1ull << 40}, 0, 0).align().zeros(32);
                 return r;
               },
               "more than the whole file"});
  d.push_back({"unaligned offset",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("a", {8}, 0, 4).align().zeros(64);
                 return r;
               },
               "is not a multiple of the alignment 32"});
  d.push_back({"overlapping tensors",
               [] {
                 Raw r;
                 r.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).align().zeros(128);
                 return r;
               },
               "overlaps or precedes tensor 'a'"});
  d.push_back({"offsets out of order",
               [] {
                 Raw r;
                 r.header(2, 0).tensor("a", {8}, 0, 64).tensor("b", {8}, 0, 0).align().zeros(128);
                 return r;
               },
               "overlaps or precedes"});
  d.push_back({"data beyond end of file",
               [] {
                 Raw r;
                 r.header(1, 0).tensor("a", {64}, 0, 0).align().zeros(224);
                 return r;
               },
               "extends beyond the data section"});
  d.push_back({"truncated tensor info",
               [] {
                 Raw r;
                 r.header(1, 0).str("abcdefghijklmnop").u32(1).u64(8).u32(0);
                 return r;
               },
               "offset at offset 64: needs 8 bytes but only 0 remain in the file"});
  Defect small{"string over a configured limit",
               [] {
                 Raw r;
                 r.header(0, 1).kv_str("k", std::string(100, 'x'));
                 return r;
               },
               "string length 100 exceeds the limit 10"};
  small.limits.max_string_bytes = 10;
  d.push_back(small);
  return d;
}

TEST(GgufReader, MalformedCorpusIsRejectedWithClearErrors) {
  const auto defects = corpus();
  EXPECT_GE(defects.size(), 20u);
  for (const Defect& d : defects) {
    auto f = parse(d.build(), d.limits);
    ASSERT_FALSE(f.ok()) << d.name << ": accepted";
    EXPECT_NE(f.message().find(d.expect), std::string::npos) << d.name << ": " << f.message();
    EXPECT_NE(f.message().find("at offset"), std::string::npos) << d.name << ": " << f.message();
  }
}

TEST(GgufReader, EveryTruncationIsAnError) {
  const Raw r = valid();
  for (size_t n = 0; n + 64 < r.b.size(); ++n) {  // the last 64 bytes are tensor data
    auto f = GgufFile::parse(r.b.data(), n);
    EXPECT_FALSE(f.ok()) << "truncated at " << n;
  }
}

TEST(GgufReader, RandomMutationsNeverCrash) {
  const Raw base = valid();
  std::mt19937 rng(42);
  int rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> m = base.b;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) m[rng() % m.size()] = static_cast<uint8_t>(rng());
    auto f = GgufFile::parse(m.data(), m.size());
    if (!f.ok()) {
      ++rejected;
      continue;
    }
    for (const auto& t : f->tensors()) {  // accepted files must be safe to read in full
      ASSERT_LE(t.data + t.n_bytes, m.data() + m.size());
      volatile uint8_t sink = 0;
      for (uint64_t k = 0; k < t.n_bytes; ++k) sink = static_cast<uint8_t>(sink + t.data[k]);
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(GgufReader, TypedAccessErrorsNameKeyAndTypes) {
  const Raw r = valid();
  auto f = parse(r);
  ASSERT_TRUE(f.ok());
  auto u = f->get_uint("general.architecture");
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.message(), "GGUF key 'general.architecture' has type string; expected an unsigned integer");
  EXPECT_EQ(f->get_string("nope").message(), "GGUF key 'nope' is missing");
}

TEST(GgufWriter, RoundTripsEveryValueKind) {
  const auto path = (std::filesystem::temp_directory_path() / "coda_test_roundtrip.gguf").string();
  GgufWriter w;
  w.set_u32("a.u32", 7);
  w.set_i32("a.i32", -3);
  w.set_u64("a.u64", 1ull << 40);
  w.set_f32("a.f32", 0.5f);
  w.set_bool("a.bool", true);
  w.set_string("a.str", "héllo");
  w.set_string_array("a.strs", {"x", "", "zz"});
  w.set_f32_array("a.f32s", {1.5f, -2.0f});
  w.set_i32_array("a.i32s", {4, -5, 6});
  ASSERT_TRUE(w.add_tensor("t0", DType::F32, {3, 2}, [](uint8_t* p) {
                 const float v[6] = {1, 2, 3, 4, 5, 6};
                 std::memcpy(p, v, sizeof v);
               }).ok());
  ASSERT_TRUE(w.add_tensor("t1", DType::Q8_0, {64}, nullptr).ok());
  EXPECT_FALSE(w.add_tensor("t2", DType::Q4_K, {100}, nullptr).ok());  // not a multiple of 256
  EXPECT_FALSE(w.add_tensor("t0", DType::F32, {1}, nullptr).ok());     // duplicate
  ASSERT_TRUE(w.write(path, 64).ok());

  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(*f->get_uint("a.u32"), 7u);
  EXPECT_EQ(*f->get_int("a.i32"), -3);
  EXPECT_FALSE(f->get_uint("a.i32").ok());
  EXPECT_EQ(*f->get_uint("a.u64"), 1ull << 40);
  EXPECT_EQ(*f->get_float("a.f32"), 0.5);
  EXPECT_TRUE(*f->get_bool("a.bool"));
  EXPECT_EQ(*f->get_string("a.str"), "héllo");
  EXPECT_EQ(f->get_string_array("a.strs")->at(2), "zz");
  EXPECT_EQ(f->get_float_array("a.f32s")->at(1), -2.0f);
  EXPECT_EQ(f->get_int_array("a.i32s")->at(1), -5);
  const GgufTensor* t = f->find_tensor("t0");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne[0], 3);
  EXPECT_EQ(t->ne[1], 2);
  float v[6];
  std::memcpy(v, t->data, sizeof v);
  EXPECT_EQ(v[5], 6.0f);
  EXPECT_EQ(f->find_tensor("t1")->n_bytes, 68u);
  EXPECT_EQ(f->find_tensor("t1")->offset % 64, 0u);
  std::filesystem::remove(path);
}

TEST(GgufReader, MissingFileIsAnError) {
  auto f = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("cannot open '/nonexistent/model.gguf'"), std::string::npos);
}

#ifdef CODA_MODEL_PATH
TEST(GgufReader, BundledModelParses) {
  auto f = GgufFile::open(CODA_MODEL_PATH);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_GT(f->tensors().size(), 50u);
}
#endif

}  // namespace
}  // namespace coda
