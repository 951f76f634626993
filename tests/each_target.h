// Running a test body once on every Highway target this CPU runs (each as the only target
// chosen), for the tests that hold every target's kernels to one result.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "hwy/highway.h"
#include "hwy/targets.h"

namespace vq {

// Runs fn with `target` as the only Highway target chosen, then restores the best one.
template <typename Fn>
void run_with_target(int64_t target, Fn& fn) {
  hwy::SetSupportedTargetsForTest(target);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  {
    SCOPED_TRACE(hwy::TargetName(target));
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

// Runs fn once with every Highway target the kernels are compiled for and this CPU runs, each as
// the only target chosen; returns how many ran. The kernels are compiled for HWY_TARGETS (the
// same in every file: SSSE3 and SSE4 are disabled in CMakeLists.txt) and, in the files that ask
// for it, AVX3_DL; a target compiled nowhere would only rerun another one. On an AVX-512 VNNI
// machine: AVX3_DL, AVX3, AVX2 and scalar; the portable one takes the narrow-vector paths.
template <typename Fn>
int for_each_supported_target(Fn fn) {
  int tried = 0;
  const int64_t all = hwy::SupportedTargets() & (HWY_TARGETS | HWY_AVX3_DL);
  for (int64_t bits = all; bits != 0; bits &= bits - 1) {
    run_with_target(bits & -bits, fn);
    ++tried;
  }
  return tried;
}

}  // namespace vq
