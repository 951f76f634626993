// What the system says about its memory.
#pragma once

#include <cstddef>

namespace vq {

// MemAvailable from /proc/meminfo in bytes (memory a process can take without swapping, page cache
// that could be dropped included), or 0 where it cannot be read.
size_t mem_available_bytes();

}  // namespace vq
