// Thread helpers over OpenMP. Work is always split into pieces whose boundaries do not depend on
// the thread count, so results are identical at any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include <algorithm>
#include <atomic>
#include <exception>

#include <omp.h>

namespace vq {

void set_num_threads(int n);  // n <= 0: OpenMP's default
int num_threads();

// Flushes subnormal floats to zero on the calling thread (x86 FTZ and DAZ). Kernels meet tiny
// values all the time (softmax weights of distant tokens); handled as subnormals they cost a
// microcode assist each, two orders of magnitude slower than a normal FMA.
void flush_denormals();

// Calls fn(i) for i in [0, n), spread over the threads; each i runs exactly once. chunk: items
// handed out at a time; 0 picks it from n (several items per step keep the scheduling cost
// small when items are many and short; callers whose items are few and long pass 1, so that the
// threads finish close together). An exception thrown by fn reaches the caller (the first one
// thrown; the items not yet started are skipped): one may not leave an OpenMP region, where it
// would end the program.
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn, int64_t chunk = 0) {
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel
  {
    flush_denormals();
    const int64_t step = chunk > 0 ? chunk : std::max<int64_t>(1, n / (16 * int64_t(omp_get_num_threads())));
#pragma omp for schedule(dynamic, step) nowait  // (the region's end is the one barrier needed)
    for (int64_t i = 0; i < n; ++i) {
      if (failed.load(std::memory_order_relaxed)) continue;
      try {
        fn(i);
      } catch (...) {
#pragma omp critical(vq_parallel_for_error)
        if (!error) error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace vq
