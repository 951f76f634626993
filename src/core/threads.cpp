// Thread count control, kept in one place so tools and tests agree on it.
#include "src/core/threads.h"

#include <omp.h>

namespace vq {

void set_num_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace vq
