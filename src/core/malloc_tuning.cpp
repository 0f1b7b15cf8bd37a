#include "core/malloc_tuning.h"

#include <malloc.h>

#include <algorithm>

namespace coda {

void tune_malloc_for_server(int arenas, unsigned long mmap_threshold) {
  mallopt(M_ARENA_MAX, std::max(1, arenas));
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold));  // also turns off the dynamic threshold
}

void return_free_memory() {
  malloc_trim(0);
}

}  // namespace coda
