#include "server/scheduler.h"

#include "core/timer.h"

namespace coda {

void Ticket::push(std::string text) {
  if (text.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunks_.push_back(std::move(text));
  }
  cv_.notify_all();
}

void Ticket::finish(Expected<GuardedResult> result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    result_.emplace(std::move(result));
  }
  cv_.notify_all();
}

bool Ticket::wait(std::string& text, bool& done, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !chunks_.empty() || result_.has_value(); });
  text.clear();
  while (!chunks_.empty()) {
    text += chunks_.front();
    chunks_.pop_front();
  }
  done = result_.has_value();
  return !text.empty() || done;
}

const Expected<GuardedResult>& Ticket::result() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return result_.has_value(); });
  return *result_;
}

Scheduler::Scheduler(Generator& gen, Metrics& metrics, SchedulerOptions opts)
    : gen_(gen), metrics_(metrics), opts_(opts), worker_([this] { work(); }) {}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& t : queue_) t->cancelled = true;
  }
  cv_.notify_all();
  worker_.join();
  for (auto& t : queue_) t->finish(Error("the server is shutting down"));
}

std::shared_ptr<Ticket> Scheduler::submit(ApiRequest request) {
  auto t = std::make_shared<Ticket>(std::move(request));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queue_.size() >= opts_.max_queue) return nullptr;
    queue_.push_back(t);
    metrics_.set_gauge("coda:num_requests_waiting", static_cast<double>(queue_.size()));
  }
  cv_.notify_one();
  return t;
}

size_t Scheduler::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Scheduler::work() {
  while (true) {
    std::shared_ptr<Ticket> t;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      t = queue_.front();
      queue_.pop_front();
      metrics_.set_gauge("coda:num_requests_waiting", static_cast<double>(queue_.size()));
    }
    if (t->cancelled) {  // the client left while waiting
      metrics_.add("coda:request_success_total", 1, "finished_reason", "abort");
      t->finish(Error("cancelled"));
      continue;
    }
    busy_ = true;
    metrics_.set_gauge("coda:num_requests_running", 1);
    run(*t);
    metrics_.set_gauge("coda:num_requests_running", 0);
    metrics_.set_gauge("coda:kv_cache_usage_perc", 0);
    busy_ = false;
  }
}

void Scheduler::run(Ticket& t) {
  Timer timer;
  int64_t tokens = 0;
  double first_ms = -1;
  const double n_ctx = static_cast<double>(gen_.n_ctx());
  auto res = generate_guarded(gen_, t.request.gen, t.request.guard, [&](const StreamChunk& c) {
    if (c.token >= 0) {
      ++tokens;
      if (first_ms < 0) first_ms = timer.ms();
      if (tokens % 16 == 1) metrics_.set_gauge("coda:kv_cache_usage_perc", static_cast<double>(tokens) / n_ctx);
    }
    t.push(c.text);
    return !t.cancelled.load();
  });
  const double total_s = timer.ms() / 1000.0;
  if (!res) {
    metrics_.add("coda:request_success_total", 1, "finished_reason", "error");
  } else {
    const GenerationResult& g = res->result;
    metrics_.add("coda:prompt_tokens_total", g.prompt_tokens);
    metrics_.add("coda:generation_tokens_total", g.completion_tokens);
    metrics_.add("coda:request_success_total", 1, "finished_reason", g.finish_reason);
    metrics_.observe("coda:time_to_first_token_seconds", g.timings.ttft_ms / 1000.0);
    if (g.completion_tokens > 1) metrics_.observe("coda:inter_token_latency_seconds", g.timings.ms_per_token / 1000.0);
    metrics_.observe("coda:e2e_request_latency_seconds", total_s);
    for (const auto& e : res->report.events) metrics_.add("coda:guard_events_total", 1, "type", e.type);
    metrics_.add("coda:guard_repairs_total", static_cast<double>(res->report.repairs.size()));
  }
  t.finish(std::move(res));
}

}  // namespace coda
