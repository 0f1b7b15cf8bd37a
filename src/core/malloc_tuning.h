// glibc's allocator, tuned for a long-running server. By default glibc keeps one arena per thread
// (up to 8 per core) and raises its mmap threshold after each large block is freed, so a burst of
// large requests leaves every worker's arena holding its high-water mark: a server that parsed 30
// large bodies on 80 HTTP threads kept 2 GB it no longer used. Bounding the arenas and fixing the
// mmap threshold (large blocks are mapped and unmapped, never kept) holds the resident size near
// what is in use; trimming when the server goes idle returns the small blocks' free pages too.
// glibc's own allocator is kept (no other allocator to install, and the engine allocates little
// per token); the executables call this once at start, the library never touches it.
#pragma once

#include <cstddef>

namespace coda {

// At most `arenas` malloc arenas; blocks of `mmap_threshold` bytes or more are mmapped.
void tune_malloc_for_server(int arenas, unsigned long mmap_threshold = 256ul << 10);
// Returns free memory from every arena to the system (malloc_trim).
void return_free_memory();

// Calls return_free_memory() when it goes out of scope if a request's body was at least
// `threshold` bytes: the blocks of a large parsed body are back in the arenas by then.
class TrimAfterLargeBody {
 public:
  explicit TrimAfterLargeBody(size_t body_bytes, size_t threshold = size_t{1} << 20) : trim_(body_bytes >= threshold) {}
  ~TrimAfterLargeBody() {
    if (trim_) return_free_memory();
  }
  TrimAfterLargeBody(const TrimAfterLargeBody&) = delete;
  TrimAfterLargeBody& operator=(const TrimAfterLargeBody&) = delete;

 private:
  bool trim_;
};

}  // namespace coda
