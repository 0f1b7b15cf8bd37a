#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CODA_CPU_RELAX() _mm_pause()
#else
#define CODA_CPU_RELAX() ((void)0)
#endif

namespace coda {

namespace {
// An idle worker spins about 50-100 us (bridging the gap between two sections of one token), and
// gives its core away every kYieldEvery pauses meanwhile: on a quiet machine sched_yield returns
// at once, on a busy one the thread that needs the core gets it now instead of at the end of the
// spin. Then it sleeps.
constexpr int kSpinIterations = 20000;
constexpr int kYieldEvery = 256;
// The caller, waiting for slots that workers have begun, yields as often.
constexpr int kCallerYieldEvery = 256;

constexpr uint64_t kSlotMask = 0xFFFF;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::clamp(n_threads, 1, 1024)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  wake_.fetch_add(1, std::memory_order_seq_cst);
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t w = wake_.load(std::memory_order_acquire);
    for (int spin = 1; w == seen && spin <= kSpinIterations; ++spin) {
      if (spin % kYieldEvery == 0)
        std::this_thread::yield();
      else
        CODA_CPU_RELAX();
      w = wake_.load(std::memory_order_acquire);
    }
    if (w == seen) {
      // Sleep until the next section. Registering first and then checking the counter inside
      // wait() cannot miss a wake-up: the caller bumps the counter and then reads `sleepers_`
      // (both sequentially consistent), so either it sees this sleeper or wait() sees the bump.
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(seen, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      continue;
    }
    seen = w;
    if (stop_.load(std::memory_order_acquire)) return;
    if (hook_) hook_(index, false);
    take_slots(index);
  }
}

void ThreadPool::take_slots(int worker) {
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    const auto next = static_cast<int>(c & kSlotMask);
    const auto slots = static_cast<int>((c >> 16) & kSlotMask);
    if (next >= slots) return;
    // The claim names its section: a worker that read the word of a finished section fails here
    // and reads again, so it never runs a slot of a section that is over.
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    if (worker > 0 && hook_) hook_(worker, true);
    (*task_)(next, slots);
    done_.fetch_add(1, std::memory_order_acq_rel);
    c = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run_slots(int n_slots, const std::function<void(int, int)>& fn) {
  n_slots = std::clamp(n_slots, 0, static_cast<int>(kSlotMask));
  if (n_slots == 0) return;
  if (n_threads_ == 1 || n_slots == 1) {
    for (int s = 0; s < n_slots; ++s) fn(s, n_slots);
    return;
  }
  task_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  ++section_;
  // Publishes task_ and done_ with the section (release); a worker's claim acquires them.
  claim_.store((static_cast<uint64_t>(section_) << 32) | (static_cast<uint64_t>(n_slots) << 16),
               std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) wake_.notify_all();
  take_slots(0);
  // Every slot is claimed; wait for the ones workers are running.
  for (int spin = 1; done_.load(std::memory_order_acquire) != n_slots; ++spin) {
    if (spin % kCallerYieldEvery == 0)
      std::this_thread::yield();
    else
      CODA_CPU_RELAX();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  // A few ranges per thread: a thread that is descheduled holds back one small range, and the
  // others take the rest. Where each range starts depends only on n, grain and the pool's size.
  const int64_t parts = std::min<int64_t>(units, n_threads_ == 1 ? 1 : 4 * static_cast<int64_t>(n_threads_));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  run_slots(static_cast<int>(parts), [&](int i, int) {
    const int64_t b = units * i / parts * grain;
    const int64_t e = std::min(n, units * (i + 1) / parts * grain);
    if (b < e) fn(b, e);
  });
}

}  // namespace coda
