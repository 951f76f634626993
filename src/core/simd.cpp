// Report the dispatched Highway target (e.g. AVX3, AVX2, EMU128).
#include "src/core/simd.h"

#include "hwy/highway.h"
#include "hwy/targets.h"

namespace vq {

std::string simd_target_name() {
  // Best target that both the CPU supports and this build compiled.
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  const int64_t best = supported & -supported;  // lowest bit is the best target
  return hwy::TargetName(best);
}

}  // namespace vq
