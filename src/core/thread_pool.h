// A fixed set of worker threads that run one parallel task at a time.
//
// Decode runs ~100 parallel sections per token, so the hand-off must cost microseconds: workers
// spin briefly on an atomic counter and only then sleep (C++20 atomic wait). The calling thread
// does its share, so `ThreadPool(1)` runs everything inline. The pool is an object passed to
// whoever needs it; there is no global pool.
//
// On a shared machine a worker is often descheduled (a build, a second server, a busy loop on
// its core), and a section that waits for every thread then waits a scheduler quantum, several
// milliseconds, for one that has nothing left to do: decode fell 100x beside one busy loop. So a
// section is a set of slots that whichever thread is running claims: the caller takes the slots
// no worker has come for, and waits only for slots already begun. Within a slot the matmuls and
// attention take chunks from a shared counter (kernels/matmul.cpp), so a thread descheduled in
// the middle delays the section by at most the chunk it holds.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace coda {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(slot, size()) once for every slot in [0, size()) and returns when all have finished.
  // Each slot runs on one thread, but one thread may run several slots one after another (a
  // descheduled worker's slot is run by the caller): per-slot scratch is safe, per-thread state
  // is not.
  void run(const std::function<void(int, int)>& fn) { run_slots(n_threads_, fn); }
  // The same with n_slots slots (at most 65,535).
  void run_slots(int n_slots, const std::function<void(int, int)>& fn);

  // Splits [0, n) into contiguous `grain`-aligned ranges (a few per thread, so that a slow thread
  // holds back little) and runs fn(begin, end) on each.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  // Test hook, called by workers (never the caller): hook(worker, false) when a worker wakes for a
  // section, before it looks for a slot, and hook(worker, true) right after it claimed one. A test
  // stalls a worker there, as the OS deschedules one. Set it while no section runs.
  void set_worker_hook(std::function<void(int, bool)> hook) { hook_ = std::move(hook); }

 private:
  void worker_loop(int index);
  // Claims and runs slots of the current section until none is left.
  void take_slots(int worker);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* task_ = nullptr;
  std::function<void(int, bool)> hook_;
  // (section << 32) | (slots << 16) | next slot: one word, so that a claim names its section.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};        // slots of the current section finished
  std::atomic<uint32_t> wake_{0};   // bumped for every section; idle workers wait on it
  std::atomic<int> sleepers_{0};    // workers asleep in wake_.wait (the caller notifies only then)
  uint32_t section_ = 0;
  std::atomic<bool> stop_{false};
};

}  // namespace coda
