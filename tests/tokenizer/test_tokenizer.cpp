// The SentencePiece tokenizer against the published Llama vectors, and round trips on the bundled
// model's vocabulary (including byte fallback) with streaming decode.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

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

TEST(SpmTokenizer, LlamaVectorsMatchExactly) {
  const std::string dir = CODA_TEST_DATA "/tokenizer/";
  const Vocab v = load(dir + "ggml-vocab-llama-spm.gguf");
  const std::string inp = read_file(dir + "ggml-vocab-llama-spm.gguf.inp");
  const std::string out = read_file(dir + "ggml-vocab-llama-spm.gguf.out");
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
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, want) << "text #" << i << ": '" << texts[i] << "'";
  }
  EXPECT_GE(i, 40u);
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
  const char32_t ranges[][2] = {{0x20, 0x7e}, {0xc0, 0x17f}, {0x400, 0x4ff}, {0x4e00, 0x4fff}, {0x1f300, 0x1f6ff}};
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) {
      const auto& r = ranges[rng() % 5];
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
    auto ids = v.encode(s, false);
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(v.decode(*ids), s);
    // Streaming: every emitted chunk is complete UTF-8 and the concatenation is the whole text.
    StreamDecoder d(v, true);
    std::string streamed;
    for (int32_t id : *ids) {
      const std::string chunk = d.push(id);
      EXPECT_EQ(utf8_complete_prefix(chunk), chunk.size());
      streamed += chunk;
    }
    streamed += d.flush();
    ASSERT_EQ(streamed, s);
  }
}

}  // namespace
}  // namespace coda
