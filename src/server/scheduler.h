// The request scheduler between the HTTP threads and the model. Requests wait in a bounded queue
// and are generated one at a time by a worker thread, each under the degeneration guard; a
// request's Ticket carries its streamed text and result back to its HTTP thread, and a cancelled
// ticket (the client went away) stops its generation at the next token or is skipped in the queue.
//
// This first scheduler runs one sequence at a time; continuous batching (several sequences per
// forward step) replaces the worker loop without changing this interface.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/generator.h"
#include "guard/guard.h"
#include "server/metrics.h"
#include "server/openai_api.h"

namespace coda {

class Ticket {
 public:
  explicit Ticket(ApiRequest r) : request(std::move(r)) {}
  const ApiRequest request;
  std::atomic<bool> cancelled{false};

  // Worker side.
  void push(std::string text);
  void finish(Expected<GuardedResult> result);
  // HTTP side: waits up to `timeout` for text or the end; returns false when nothing came.
  bool wait(std::string& text, bool& done, std::chrono::milliseconds timeout);
  // Waits for the end and returns the result.
  const Expected<GuardedResult>& result();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  std::optional<Expected<GuardedResult>> result_;
};

struct SchedulerOptions {
  size_t max_queue = 64;  // waiting requests beyond this are refused (429)
};

class Scheduler {
 public:
  Scheduler(Generator& gen, Metrics& metrics, SchedulerOptions opts);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request; null when the queue is full.
  std::shared_ptr<Ticket> submit(ApiRequest request);
  size_t waiting() const;
  bool busy() const { return busy_.load(); }

 private:
  void work();
  void run(Ticket& t);

  Generator& gen_;
  Metrics& metrics_;
  SchedulerOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Ticket>> queue_;
  bool stop_ = false;
  std::atomic<bool> busy_{false};
  std::thread worker_;
};

}  // namespace coda
