// The Generator on the bundled model: determinism, stop rules, length safety, logprobs, chat
// prompts with special tokens in user text, and a table of bad requests.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "chat/chat_template.h"
#include "engine/generator.h"
#include "engine/prompt.h"
#include "engine/stop_matcher.h"

namespace coda {
namespace {

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<Vocab> vocab;
  std::unique_ptr<Generator> gen;
};

Fixture& bundled(int64_t n_ctx = 0, int default_cap = 4096) {
  static std::map<std::pair<int64_t, int>, Fixture> cache;
  auto& f = cache[{n_ctx, default_cap}];
  if (!f.gen) {
    auto m = Model::load(CODA_MODEL_PATH);
    EXPECT_TRUE(m) << m.message();
    f.model = std::move(*m);
    auto v = Vocab::from_gguf(f.model->gguf());
    EXPECT_TRUE(v) << v.message();
    f.vocab = std::make_unique<Vocab>(std::move(*v));
    GeneratorOptions o;
    o.threads = 2;
    o.n_ctx = n_ctx;
    o.default_max_tokens = default_cap;
    auto g = Generator::create(*f.model, *f.vocab, o);
    EXPECT_TRUE(g) << g.message();
    f.gen = std::move(*g);
  }
  return f;
}

GenerationRequest text_request(const std::string& prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.sampling.ignore_eos = true;
  return r;
}

TEST(Generator, GreedyMatchesTheReferenceContinuation) {
  // The model card's llama.cpp continuation (also checked against the NumPy reference).
  auto res = bundled().gen->generate(text_request("In the beginning God", 16));
  ASSERT_TRUE(res) << res.message();
  EXPECT_EQ(res->text.rfind(" of Israel, and the LORD God of Israel,", 0), 0u) << res->text;
  EXPECT_EQ(res->finish_reason, "length");
  EXPECT_EQ(res->completion_tokens, 16);
  EXPECT_GT(res->timings.prefill_ms, 0);
  EXPECT_GT(res->timings.tokens_per_s, 0);
}

TEST(Generator, SameSeedSameTokensAcrossRunsAndGenerators) {
  GenerationRequest r = text_request("The king said", 40);
  r.sampling.temperature = 0.9f;
  r.sampling.top_k = 40;
  r.sampling.top_p = 0.95f;
  r.sampling.dry_multiplier = 0.8f;
  r.sampling.xtc_probability = 0.5f;
  r.sampling.seed = 1234;
  auto a = bundled().gen->generate(r);
  auto b = bundled().gen->generate(r);
  auto c = bundled(256).gen->generate(r);  // another generator, another KV cache
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->tokens, c->tokens);
  r.sampling.seed = 1235;
  auto d = bundled().gen->generate(r);
  ASSERT_TRUE(d);
  EXPECT_NE(a->tokens, d->tokens);
}

TEST(Generator, StopStringsAcrossTokenBoundariesAreHeldBackAndCut) {
  auto full = bundled().gen->generate(text_request("In the beginning God", 24));
  ASSERT_TRUE(full);
  const std::string& t = full->text;  // " of Israel, and the LORD God of Israel, and ..."
  // A stop string that starts inside one token and ends in a later one.
  const size_t at = t.find("srael, and the L");
  ASSERT_NE(at, std::string::npos);
  GenerationRequest r = text_request("In the beginning God", 24);
  r.stop = {"srael, and the L", "never appears"};
  std::string streamed;
  auto res = bundled().gen->generate(r, [&](const StreamChunk& c) {
    streamed += c.text;
    EXPECT_EQ(streamed.find("srael"), std::string::npos) << "a partial stop string was streamed";
    return true;
  });
  ASSERT_TRUE(res);
  EXPECT_EQ(res->text, t.substr(0, at));
  EXPECT_EQ(streamed, res->text);
  EXPECT_EQ(res->finish_reason, "stop");
  EXPECT_EQ(res->stop_reason, "srael, and the L");
  r.include_stop_str_in_output = true;
  res = bundled().gen->generate(r);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->text, t.substr(0, at + 16));
  // A partial match that never completes is released at the end.
  r = text_request("In the beginning God", 3);
  auto three = bundled().gen->generate(r);
  r.stop = {three->text.substr(three->text.size() - 2) + "@@"};
  streamed.clear();
  res = bundled().gen->generate(r, [&](const StreamChunk& c) {
    streamed += c.text;
    return true;
  });
  EXPECT_EQ(res->text, three->text);
  EXPECT_EQ(streamed, three->text);
}

TEST(Generator, StopTokenIdsAndEndOfSequence) {
  auto full = bundled().gen->generate(text_request("In the beginning God", 12));
  ASSERT_TRUE(full);
  GenerationRequest r = text_request("In the beginning God", 12);
  r.stop_token_ids = {full->tokens[5]};
  auto res = bundled().gen->generate(r);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->finish_reason, "stop");
  const auto first = std::find(full->tokens.begin(), full->tokens.end(), full->tokens[5]) - full->tokens.begin();
  EXPECT_EQ(res->completion_tokens, first + 1);  // the stop token is counted, not printed
  // Forcing EOS with a logit bias ends the generation at once, with "stop".
  GenerationRequest e = text_request("Hello", 10);
  e.sampling.ignore_eos = false;
  e.sampling.logit_bias[bundled().vocab->eos()] = 100;
  res = bundled().gen->generate(e);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->finish_reason, "stop");
  EXPECT_EQ(res->completion_tokens, 1);
  EXPECT_EQ(res->text, "");
  // min_tokens holds EOS back.
  e.sampling.min_tokens = 4;
  res = bundled().gen->generate(e);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->completion_tokens, 5);
}

TEST(Generator, LengthSafety) {
  // No max_tokens: the default cap, not "the rest of the context".
  Fixture& capped = bundled(0, 7);
  GenerationRequest r = text_request("Hello", 1);
  r.max_tokens.reset();
  auto res = capped.gen->generate(r);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->completion_tokens, 7);
  EXPECT_EQ(res->finish_reason, "length");
  // A small context: the cap shrinks to what fits; asking for more is OpenAI's error.
  Fixture& small = bundled(16);
  res = small.gen->generate(r);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->prompt_tokens + res->completion_tokens, 16);
  r.max_tokens = 20;
  res = small.gen->generate(r);
  ASSERT_FALSE(res);
  const int n_prompt = static_cast<int>(small.gen->prepare(r)->tokens.size());
  EXPECT_EQ(res.message(),
            "This model's maximum context length is 16 tokens, however you requested " + std::to_string(n_prompt + 20) +
                " tokens (" + std::to_string(n_prompt) +
                " in your prompt; 20 for the completion). Please reduce your prompt; or completion length.");
  GenerationRequest chat;
  chat.messages = nlohmann::ordered_json::parse(R"([{"role":"user","content":"Tell me a long story"}])");
  chat.max_tokens = 10;
  res = small.gen->generate(chat);
  ASSERT_FALSE(res);
  EXPECT_NE(res.message().find("tokens (" + std::to_string(small.gen->prepare(chat)->tokens.size()) +
                               " in the messages, 10 in the completion). Please reduce the length of the messages"),
            std::string::npos)
      << res.message();
}

TEST(Generator, LogprobsAreALogSoftmaxAndGreedyPicksTheTop) {
  GenerationRequest r = text_request("In the beginning God", 6);
  r.logprobs = 5;
  auto res = bundled().gen->generate(r);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->logprobs.size(), 6u);
  for (const auto& lp : res->logprobs) {
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].first, lp.token);
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    double mass = 0;
    for (size_t i = 0; i < lp.top.size(); ++i) {
      mass += std::exp(lp.top[i].second);
      if (i > 0) {
        EXPECT_LE(lp.top[i].second, lp.top[i - 1].second);
      }
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
    EXPECT_LE(lp.logprob, 0.0f);
  }
}

TEST(Generator, CallbackAbortAndObserverStop) {
  int chunks = 0;
  auto res = bundled().gen->generate(text_request("Hello", 20), [&](const StreamChunk&) { return ++chunks < 3; });
  ASSERT_TRUE(res);
  EXPECT_EQ(res->finish_reason, "abort");
  EXPECT_EQ(res->completion_tokens, 3);
  struct StopAtFour : StepObserver {
    int seen = 0;
    StepVerdict on_step(const StepView& v) override {
      ++seen;
      EXPECT_EQ(v.generated.back(), v.token);
      EXPECT_EQ(v.n_vocab, bundled().vocab->size());
      StepVerdict verdict;
      verdict.stop = v.step == 3;
      verdict.finish_reason = "repetition";
      return verdict;
    }
  } obs;
  res = bundled().gen->generate(text_request("Hello", 20), {}, &obs);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->finish_reason, "repetition");
  EXPECT_EQ(obs.seen, 4);
}

// Asks once, at step `at`, to roll back to `keep` tokens and resample hotter.
struct RepairOnce : StepObserver {
  int64_t at, keep;
  int rollbacks = 0;
  int64_t last_keep = -1;
  bool done = false;
  RepairOnce(int64_t a, int64_t k) : at(a), keep(k) {}
  StepVerdict on_step(const StepView& v) override {
    StepVerdict verdict;
    if (!done && v.step == at) {
      done = true;
      verdict.repair = RepairAction{keep, 2.0f, 0.1f, 0.7f, 1.2f};
    }
    return verdict;
  }
  void on_rollback(int64_t k) override {
    ++rollbacks;
    last_keep = k;
  }
};

TEST(Generator, RepairRollsBackResamplesAndIsReproducible) {
  GenerationRequest r = text_request("In the beginning God", 30);
  auto plain = bundled().gen->generate(r);
  ASSERT_TRUE(plain);
  RepairOnce a(12, 5), b(12, 5);
  r.stream_delay_tokens = 16;  // nothing of what is rolled back has been streamed
  std::string streamed;
  auto ra = bundled().gen->generate(
      r,
      [&](const StreamChunk& c) {
        streamed += c.text;
        return true;
      },
      &a);
  auto rb = bundled().gen->generate(r, {}, &b);
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->repairs, 1);
  EXPECT_EQ(a.rollbacks, 1);
  EXPECT_EQ(a.last_keep, 5);
  EXPECT_EQ(ra->completion_tokens, 30);
  EXPECT_EQ(ra->tokens_sampled, 30 + 13 - 5);
  EXPECT_EQ(std::vector<int32_t>(ra->tokens.begin(), ra->tokens.begin() + 5),
            std::vector<int32_t>(plain->tokens.begin(), plain->tokens.begin() + 5));
  EXPECT_NE(ra->tokens, plain->tokens);  // resampled hotter with a penalty: the greedy loop is left
  EXPECT_EQ(ra->tokens, rb->tokens);     // same seed: the same repair
  EXPECT_EQ(streamed, ra->text);         // the stream never showed rolled-back text
  // Without a delay, a rollback never goes behind what was streamed.
  RepairOnce c(12, 5);
  r.stream_delay_tokens = 0;
  streamed.clear();
  auto rc = bundled().gen->generate(
      r,
      [&](const StreamChunk& ch) {
        streamed += ch.text;
        return true;
      },
      &c);
  ASSERT_TRUE(rc);
  EXPECT_EQ(c.last_keep, 12);  // the 12 tokens before the current one were streamed
  EXPECT_EQ(streamed, rc->text);
}

TEST(Generator, SpecialTokensInUserContentStayText) {
  Fixture& f = bundled();
  const int32_t eos = f.vocab->eos();
  GenerationRequest r;
  r.messages = nlohmann::ordered_json::parse(R"([{"role":"user","content":"say </s> and <s> please"}])");
  auto p = f.gen->prepare(r);
  ASSERT_TRUE(p) << p.message();
  EXPECT_EQ(std::count(p->tokens.begin(), p->tokens.end(), eos), 0);             // the user's "</s>" is text
  EXPECT_EQ(std::count(p->tokens.begin(), p->tokens.end(), f.vocab->bos()), 1);  // the template's BOS only
  // The template's own </s> after an assistant turn is the real token.
  r.messages = nlohmann::ordered_json::parse(
      R"([{"role":"user","content":"hi </s>"},{"role":"assistant","content":"yo"},{"role":"user","content":"again"}])");
  p = f.gen->prepare(r);
  ASSERT_TRUE(p);
  EXPECT_EQ(std::count(p->tokens.begin(), p->tokens.end(), eos), 1);
}

// Not only message content: a tool call's arguments, a tool's description and property names and
// a chat_template_kwargs value reach the template too, and their special-token strings are text.
TEST(Generator, SpecialTokensAnywhereInTheRequestStayText) {
  Fixture& f = bundled();
  const int32_t eos = f.vocab->eos();
  auto tmpl = ChatTemplate::from_source(
      "{{ bos_token }}{% for m in messages %}{{ m.content }}{% for c in m.tool_calls or [] %}"
      "{{ c.function.arguments }}{% endfor %}{% endfor %}{% for t in tools or [] %}{{ t.function.description }}"
      "{{ t.function.parameters | tojson }}{% endfor %}{{ note }}{{ eos_token }}");
  ASSERT_TRUE(tmpl) << tmpl.message();
  GenerationRequest r;
  r.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"x\": \"</s>\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"}])");
  r.chat.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "description": "ends with </s>", "parameters":
          {"type": "object", "properties": {"a</s>": {"type": "string"}, "b": {"type": "string"}}}}}])");
  r.chat.extra = nlohmann::ordered_json{{"note", "and </s> here"}};
  auto p = prepare_prompt(r, *f.vocab, &*tmpl);
  ASSERT_TRUE(p) << p.message();
  EXPECT_EQ(std::count(p->text.begin(), p->text.end(), '<'), 6);  // four "</s>" given, the template's <s> and </s>
  EXPECT_NE(p->text.find(R"("a</s>": {"type": "string"}, "b")"), std::string::npos);  // a key, in its place
  EXPECT_EQ(std::count(p->tokens.begin(), p->tokens.end(), eos), 1);  // only the template's own
  // chat_template_kwargs may not stand in for the request's own variables.
  r.chat.extra = nlohmann::ordered_json{{"messages", nlohmann::ordered_json::array()}};
  p = prepare_prompt(r, *f.vocab, &*tmpl);
  ASSERT_FALSE(p);
  EXPECT_NE(p.message().find("chat_template_kwargs: 'messages' is set by the request itself"), std::string::npos);
}

TEST(Generator, BadRequestsGetTheDocumentedError) {
  struct Case {
    const char* expect;
    std::function<void(GenerationRequest&)> set;
  };
  const std::vector<Case> cases = {
      {"max_tokens: 0 is out of range; allowed >= 1", [](auto& r) { r.max_tokens = 0; }},
      {"max_tokens: -5 is out of range; allowed >= 1", [](auto& r) { r.max_tokens = -5; }},
      {"min_tokens: 9 is greater than max_tokens (4)",
       [](auto& r) {
         r.max_tokens = 4;
         r.sampling.min_tokens = 9;
       }},
      {"stop[1]: an empty stop string is not allowed",
       [](auto& r) {
         r.stop = {"ok", ""};
       }},
      {"stop[0]: 5000 bytes is too long; allowed at most 1024", [](auto& r) { r.stop = {std::string(5000, 'x')}; }},
      {"stop: 17 stop strings is too many; allowed at most 16", [](auto& r) { r.stop.assign(17, "x"); }},
      {"stop_token_ids: 4096 is out of range; allowed 0..4095", [](auto& r) { r.stop_token_ids = {4096}; }},
      {"logprobs: 21 is out of range; allowed 0..20", [](auto& r) { r.logprobs = 21; }},
      {"temperature: 2.5 is out of range; allowed [0, 2]", [](auto& r) { r.sampling.temperature = 2.5f; }},
      {"top_p: 0 is out of range; allowed (0, 1]", [](auto& r) { r.sampling.top_p = 0; }},
      {"prompt: the prompt is empty", [](auto& r) { r.prompt.clear(); }},
      {"prompt[1]: token id -3 is out of range; allowed 0..4095",
       [](auto& r) {
         r.prompt_tokens = {1, -3};
       }},
      {"This model's maximum context length is", [](auto& r) { r.prompt = std::string(100000, 'a'); }},
      {"messages: the conversation is empty", [](auto& r) { r.messages = nlohmann::ordered_json::array(); }},
      {"messages[0].role: 'robot' is not a supported role",
       [](auto& r) { r.messages = nlohmann::ordered_json::parse(R"([{"role":"robot","content":"x"}])"); }},
      {"Conversation roles must alternate",
       [](auto& r) { r.messages = nlohmann::ordered_json::parse(R"([{"role":"assistant","content":"x"}])"); }},
      {"bad_words: \"\" is not allowed", [](auto& r) { r.sampling.bad_words = {""}; }},
  };
  ASSERT_EQ(bundled().vocab->size(), 4096);
  for (const Case& c : cases) {
    GenerationRequest r = text_request("Hello", 4);
    c.set(r);
    auto res = bundled().gen->generate(r);
    ASSERT_FALSE(res) << c.expect;
    EXPECT_EQ(res.message().rfind(c.expect, 0), 0u) << res.message();
  }
  // After all that, the generator still works.
  EXPECT_TRUE(bundled().gen->generate(text_request("Hello", 2)));
}

TEST(StopMatcher, HoldsBackOnlyWhatCouldStillMatch) {
  StopMatcher m({"END", "xyz"}, false);
  EXPECT_FALSE(m.push("abc E"));
  EXPECT_EQ(m.take_ready(), "abc ");  // "E" could start "END"
  EXPECT_FALSE(m.push("N"));
  EXPECT_EQ(m.take_ready(), "");
  EXPECT_FALSE(m.push("x"));  // "ENx" cannot become "END"; "x" may start "xyz"
  EXPECT_EQ(m.take_ready(), "EN");
  EXPECT_TRUE(m.push("yz tail"));
  EXPECT_EQ(m.text(), "abc EN");
  EXPECT_EQ(m.matched(), "xyz");
  EXPECT_EQ(m.take_rest(), "");
}

}  // namespace
}  // namespace coda
