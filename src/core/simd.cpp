// Report the dispatched Highway target (e.g. AVX3, AVX2, EMU128).
#include "src/core/simd.h"

#include <fmt/format.h>
#include <unistd.h>

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "veloxquant/error.h"

namespace vq {

std::string simd_target_name() {
  // Best target that both the CPU supports and this build compiled.
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  const int64_t best = supported & -supported;  // lowest bit is the best target
  std::string name = hwy::TargetName(best);
  // AVX3_DL is compiled only where a file asks for it (q4.cpp for vpdpbusd, rabitq_lanes.cpp for
  // vpopcntd), so on such a CPU those kernels run one target above the rest.
  if (best == HWY_AVX3 && (hwy::SupportedTargets() & HWY_AVX3_DL) != 0) name += " (q4, rabitq: AVX3_DL)";
  return name;
}

void limit_simd_target(const std::string& name) {
  int64_t best_allowed = 0;  // the best target kept; every worse one stays
  if (name == "avx2") {
    best_allowed = HWY_AVX2;
  } else if (name == "avx3") {
    best_allowed = HWY_AVX3;
  } else {
    VQ_CHECK(name == "best", fmt::format("--simd: unknown target '{}' (best, avx3, avx2)", name));
    return;
  }
  VQ_CHECK((hwy::SupportedTargets() & best_allowed) != 0,
                 fmt::format("--simd {}: this CPU does not run that target", name));
  // Highway's target bits: a lower bit is a better target.
  hwy::SetSupportedTargetsForTest(hwy::SupportedTargets() & ~(best_allowed - 1));
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

bool cpu_is_intel() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}

size_t l1_data_cache_bytes() {
  static const size_t bytes = [] {
    const long v = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return v > 0 ? size_t(v) : size_t(32768);
  }();
  return bytes;
}

}  // namespace vq
