// Which SIMD target Highway chose at run time, for reports.
#pragma once

#include <cstddef>
#include <string>

namespace vq {

std::string simd_target_name();

// Limits Highway's run-time choice for the rest of the process, so that one machine can measure
// the kernels another CPU would run: "best" (no limit), "avx2" (no AVX-512), "avx3" (AVX-512
// without the AVX3_DL extensions). vq::Error (usage) for another name or a target this CPU lacks.
void limit_simd_target(const std::string& name);

// Whether the CPU is Intel's: kernels whose best instruction mix differs between Intel and AMD
// cores (with the same results either way) choose by it.
bool cpu_is_intel();

// The first-level data cache of a core in bytes (32 KB where the system does not say): kernels
// that keep tables in L1 choose how many to keep at once by it.
size_t l1_data_cache_bytes();

}  // namespace vq
