// Which SIMD target Highway chose at run time, for reports.
#pragma once

#include <string>

namespace vq {

std::string simd_target_name();

}  // namespace vq
