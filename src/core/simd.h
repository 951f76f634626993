// Which SIMD target Highway chose at run time, for reports.
#pragma once

#include <string>

namespace vq {

std::string simd_target_name();

// Whether the CPU is Intel's: kernels whose best instruction mix differs between Intel and AMD
// cores (with the same results either way) choose by it.
bool cpu_is_intel();

}  // namespace vq
