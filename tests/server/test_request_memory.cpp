// The heap a request takes on its way from body to prompt tokens, against the body's size. This
// executable replaces the global operator new/delete to count the bytes in use and their peak, so
// the figures are exact and independent of timing, threads and the allocator's caching (RSS is
// checked by the server's hostile-input test). The steps are the server's own: the limit scan,
// parse_api_request, then prepare_prompt on the bundled model's vocabulary and chat template.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "chat/chat_template.h"
#include "engine/prompt.h"
#include "gguf/gguf.h"
#include "server/openai_api.h"
#include "server/request_limits.h"
#include "tokenizer/vocab.h"

namespace {

std::atomic<size_t> g_in_use{0};
std::atomic<size_t> g_peak{0};

// Each block carries its size in a 16-byte header so delete can subtract it.
void* counted_alloc(size_t n) {
  void* p = std::malloc(n + 16);
  if (!p) throw std::bad_alloc();
  *static_cast<size_t*>(p) = n;
  const size_t now = g_in_use.fetch_add(n) + n;
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return static_cast<char*>(p) + 16;
}

void counted_free(void* q) {
  if (!q) return;
  void* p = static_cast<char*>(q) - 16;
  g_in_use.fetch_sub(*static_cast<size_t*>(p));
  std::free(p);
}

// Peak bytes above the level at the start of a measurement.
struct PeakScope {
  size_t base = g_in_use.load();
  PeakScope() { g_peak.store(base); }
  size_t peak() const { return g_peak.load() - base; }
};

}  // namespace

void* operator new(size_t n) {
  return counted_alloc(n);
}
void* operator new[](size_t n) {
  return counted_alloc(n);
}
void operator delete(void* p) noexcept {
  counted_free(p);
}
void operator delete[](void* p) noexcept {
  counted_free(p);
}
void operator delete(void* p, size_t) noexcept {
  counted_free(p);
}
void operator delete[](void* p, size_t) noexcept {
  counted_free(p);
}

namespace coda {
namespace {

// A chat body of `n` short user/assistant turns, about 80 bytes of JSON each, as a client that
// replays a long conversation sends it.
std::string chat_body(size_t n) {
  std::string b = "{\"model\":\"coda\",\"max_tokens\":4,\"messages\":[";
  for (size_t i = 0; i < n; ++i) {
    if (i) b += ',';
    b += i % 2 ? "{\"role\":\"assistant\",\"content\":\"Sure, here is number " + std::to_string(i) + ".\"}"
               : "{\"role\":\"user\",\"content\":\"Tell me about the number " + std::to_string(i) + ".\"}";
  }
  return b + "]}";
}

struct Fixture {
  GgufFile gguf;
  Vocab vocab;
  ChatTemplate tmpl;
};

Fixture& model() {
  static Fixture* f = [] {
    auto g = GgufFile::open(CODA_MODEL_PATH);
    EXPECT_TRUE(g.ok()) << g.message();
    auto v = Vocab::from_gguf(*g);
    EXPECT_TRUE(v.ok()) << v.message();
    auto t = ChatTemplate::for_model(*g, *v);
    EXPECT_TRUE(t.ok()) << t.message();
    return new Fixture{std::move(*g), std::move(*v), std::move(*t)};
  }();
  return *f;
}

// Peak heap of the whole path for one body (the body itself is the caller's, like httplib's).
size_t path_peak(const std::string& body, const RequestLimits& limits, bool* accepted) {
  Fixture& f = model();
  PeakScope scope;
  *accepted = false;
  if (check_request_limits(body, limits)) return scope.peak();
  ServerDefaults d;
  d.model_id = "coda";
  auto parsed = parse_api_request(body, true, d);
  auto* r = std::get_if<ApiRequest>(&parsed);
  EXPECT_NE(r, nullptr);
  if (!r) return scope.peak();
  auto p = prepare_prompt(r->gen, f.vocab, &f.tmpl);
  EXPECT_TRUE(p.ok()) << p.message();
  *accepted = p.ok() && !p->tokens.empty();
  return scope.peak();
}

TEST(RequestMemory, AConversationWithinTheLimitsCostsASmallMultipleOfItsBody) {
  const RequestLimits limits;
  for (size_t n : {size_t{64}, size_t{1024}, limits.max_messages}) {
    const std::string body = chat_body(n);
    bool accepted = false;
    const size_t peak = path_peak(body, limits, &accepted);
    const double ratio = static_cast<double>(peak) / static_cast<double>(body.size());
    std::printf("%zu messages, body %zu bytes: peak %zu bytes = %.1fx the body\n", n, body.size(), peak, ratio);
    EXPECT_TRUE(accepted) << n;
    EXPECT_LT(ratio, 14.0) << n << " messages";
  }
}

TEST(RequestMemory, OversizedConversationsAreRefusedForLessThanTheirBody) {
  const RequestLimits limits;
  const std::string body = chat_body(100000);  // the 3.3 MB request
  bool accepted = true;
  const size_t peak = path_peak(body, limits, &accepted);
  std::printf("100000 messages, body %zu bytes: refused, peak %zu bytes\n", body.size(), peak);
  EXPECT_FALSE(accepted);
  EXPECT_LT(peak, body.size() / 10);
  auto e = check_request_limits(body, limits);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "messages");
  EXPECT_NE(e->message.find(std::to_string(limits.max_messages)), std::string::npos) << e->message;
}

// Parsing alone (the JSON document the server keeps while the request waits) is a few times the body.
TEST(RequestMemory, ParsingHoldsAFewTimesTheBody) {
  const std::string body = chat_body(RequestLimits{}.max_messages);
  ServerDefaults d;
  d.model_id = "coda";
  PeakScope scope;
  auto parsed = parse_api_request(body, true, d);
  const size_t peak = scope.peak();
  ASSERT_TRUE(std::holds_alternative<ApiRequest>(parsed));
  std::printf("parse alone, body %zu bytes: peak %zu bytes = %.1fx the body\n", body.size(), peak,
              static_cast<double>(peak) / static_cast<double>(body.size()));
  EXPECT_LT(peak, 5 * body.size());
}

// The same conversation with the limit raised: what the path costs at that size, printed for the
// note (the before/after table in docs/server.md comes from this line).
TEST(RequestMemory, HundredThousandMessagesWhenAnOperatorAllowsThem) {
  RequestLimits limits;
  limits.max_messages = 200000;
  const std::string body = chat_body(100000);
  bool accepted = false;
  const size_t peak = path_peak(body, limits, &accepted);
  const double ratio = static_cast<double>(peak) / static_cast<double>(body.size());
  std::printf("100000 messages allowed, body %zu bytes: peak %zu bytes = %.1fx the body\n", body.size(), peak, ratio);
  EXPECT_TRUE(accepted);
  EXPECT_LT(ratio, 14.0);
}

}  // namespace
}  // namespace coda
