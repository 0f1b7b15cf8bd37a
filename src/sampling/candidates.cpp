#include "sampling/candidates.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/kernels.h"

namespace coda {

void Candidates::assign(const float* logits_in, int32_t n_vocab) {
  ids.resize(static_cast<size_t>(n_vocab));
  std::iota(ids.begin(), ids.end(), 0);
  logits.assign(logits_in, logits_in + n_vocab);
  sorted = false;
  identity = true;
}

void Candidates::take(const std::vector<size_t>& order) {
  std::vector<int32_t> new_ids(order.size());
  std::vector<float> new_logits(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    new_ids[i] = ids[order[i]];
    new_logits[i] = logits[order[i]];
  }
  ids.swap(new_ids);
  logits.swap(new_logits);
  sorted = true;
  identity = false;
}

void Candidates::sort() {
  if (sorted) return;
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && ids[a] < ids[b]); });
  take(order);
}

void Candidates::keep_top(size_t n) {
  if (sorted || n >= ids.size()) {
    sort();
    truncate(n);
    return;
  }
  if (n * 16 <= ids.size()) {
    // A small k (top-k 40 of 128K): one pass with a heap whose top is the worst kept candidate;
    // almost every logit is rejected by a single comparison with it.
    using Entry = std::pair<float, int32_t>;
    auto better = [](const Entry& a, const Entry& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    std::vector<Entry> heap;
    heap.reserve(n);
    const KernelTable& k = kernels();
    constexpr size_t kBlock = 64;
    for (size_t b = 0; b < ids.size(); b += kBlock) {
      const size_t e_end = std::min(ids.size(), b + kBlock);
      // Once the heap is full, a block whose maximum is below the worst kept logit has nothing to add.
      if (heap.size() == n && k.max_f32(logits.data() + b, static_cast<int64_t>(e_end - b)) < heap.front().first)
        continue;
      for (size_t i = b; i < e_end; ++i) {
        const Entry e{logits[i], ids[i]};
        if (heap.size() < n) {
          heap.push_back(e);
          std::push_heap(heap.begin(), heap.end(), better);
        } else if (better(e, heap.front())) {
          std::pop_heap(heap.begin(), heap.end(), better);
          heap.back() = e;
          std::push_heap(heap.begin(), heap.end(), better);
        }
      }
    }
    std::sort(heap.begin(), heap.end(), better);
    ids.resize(n);
    logits.resize(n);
    for (size_t i = 0; i < n; ++i) {
      logits[i] = heap[i].first;
      ids[i] = heap[i].second;
    }
    sorted = true;
    identity = false;
    return;
  }
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto before = [&](size_t a, size_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && ids[a] < ids[b]);
  };
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(), before);
  order.resize(n);
  std::sort(order.begin(), order.end(), before);
  take(order);
}

void Candidates::keep_at_least(float threshold) {
  std::vector<size_t> keep;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] >= threshold) keep.push_back(i);
  if (keep.size() == logits.size()) return;
  const bool was_sorted = sorted;
  take(keep);
  sorted = was_sorted;
}

void Candidates::truncate(size_t n) {
  if (n < ids.size()) {
    identity = false;
    ids.resize(n);
    logits.resize(n);
  }
}

float* Candidates::logit_of(int32_t id) {
  if (id < 0) return nullptr;
  if (identity) return static_cast<size_t>(id) < logits.size() ? &logits[static_cast<size_t>(id)] : nullptr;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == id) return &logits[i];
  return nullptr;
}

std::vector<float> Candidates::probs() const {
  std::vector<float> p(ids.size(), 0.0f);
  if (p.empty()) return p;
  const float max = sorted ? logits.front() : *std::max_element(logits.begin(), logits.end());
  if (std::isinf(max) && max < 0) {
    std::fill(p.begin(), p.end(), 1.0f / static_cast<float>(p.size()));
    return p;
  }
  const float sum = kernels().exp_sum(logits.data(), p.data(), static_cast<int64_t>(p.size()), max);
  const float inv = 1.0f / sum;
  for (float& x : p) x *= inv;
  return p;
}

}  // namespace coda
