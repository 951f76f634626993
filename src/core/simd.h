// Which SIMD target Highway chose at run time, for reports.
#pragma once

#include <cstddef>
#include <string>

namespace vq {

std::string simd_target_name();

// Whether the CPU is Intel's: kernels whose best instruction mix differs between Intel and AMD
// cores (with the same results either way) choose by it.
bool cpu_is_intel();

// The first-level data cache of a core in bytes (32 KB where the system does not say): kernels
// that keep tables in L1 choose how many to keep at once by it.
size_t l1_data_cache_bytes();

}  // namespace vq
