// The scheduler's gauges follow every way a request leaves the queue. Built with pause/resume so
// the queue holds exactly what the test put there; waits are on conditions, bounded only against
// a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/openai_api.h"
#include "server/scheduler.h"

namespace coda {
namespace {

// Polls `cond` until it holds; the deadline only bounds a hang (the test then fails).
template <typename F>
bool wait_until(F cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return cond();
}

// A request whose client left while it waited is dropped at admission, and the waiting gauge
// goes back to 0 with it (it used to stay at 1 when it was the last one queued).
TEST(Scheduler, ARequestCancelledInTheQueueLeavesTheWaitingGauge) {
  GeneratorOptions go;
  go.threads = 1;
  auto loaded = load_generator(CODA_MODEL_PATH, go);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  Metrics metrics;
  Scheduler sched(*loaded->generator, metrics, SchedulerOptions{});
  ServerDefaults d;
  d.model_id = "coda";
  sched.pause();
  std::vector<std::shared_ptr<Ticket>> tickets;
  for (int i = 0; i < 2; ++i) {
    auto parsed = parse_api_request(R"({"prompt": "In the beginning God", "max_tokens": 8})", false, d);
    ASSERT_TRUE(std::holds_alternative<ApiRequest>(parsed));
    auto t = sched.submit(std::get<ApiRequest>(std::move(parsed)));
    ASSERT_NE(t, nullptr);
    tickets.push_back(t);
  }
  EXPECT_EQ(metrics.value("coda:num_requests_waiting"), 2);
  tickets[1]->cancelled = true;  // the last one queued: its client is gone
  sched.resume();
  EXPECT_TRUE(wait_until([&] { return sched.waiting() == 0 && metrics.value("coda:num_requests_running") == 0; }));
  // The first ran; the second was dropped unrun. Both are accounted for, and nothing waits.
  EXPECT_TRUE(wait_until([&] {
    return metrics.value("coda:request_success_total", "abort") == 1 &&
           metrics.value("coda:request_success_total", "length") + metrics.value("coda:request_success_total", "stop") +
                   metrics.value("coda:request_success_total", "repetition") ==
               1;
  }));
  EXPECT_EQ(metrics.value("coda:num_requests_waiting"), 0);
  EXPECT_FALSE(tickets[1]->result().ok());
  EXPECT_TRUE(tickets[0]->result().ok());
}

}  // namespace
}  // namespace coda
