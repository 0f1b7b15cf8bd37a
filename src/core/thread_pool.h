// A fixed set of worker threads that run one parallel task at a time.
//
// Decode runs ~100 parallel matmuls per token, so the hand-off must cost microseconds: workers
// spin briefly on an atomic generation counter and only then sleep (C++20 atomic wait). The
// calling thread is worker 0 and does its share, so `ThreadPool(1)` runs everything inline.
// The pool is an object passed to whoever needs it; there is no global pool.
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

  // Runs fn(thread_index, n_threads) once on every thread and returns when all have finished.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into at most size() contiguous ranges of `grain`-aligned length and runs
  // fn(begin, end) on each.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace coda
