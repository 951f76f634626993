// Streaming-read bandwidth probe: several independent vector accumulators so the loop is bound
// by loads, not by the latency of one add chain.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/core/bandwidth.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/core/aligned_buffer.h"
#include "src/core/bandwidth.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

HWY_BEFORE_NAMESPACE();
namespace vq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float SumFloats(const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, hn::Load(d, x + i));
    a1 = hn::Add(a1, hn::Load(d, x + i + N));
    a2 = hn::Add(a2, hn::Load(d, x + i + 2 * N));
    a3 = hn::Add(a3, hn::Load(d, x + i + 3 * N));
  }
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += x[i];
  return s;
}

}  // namespace HWY_NAMESPACE
}  // namespace vq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq {
HWY_EXPORT(SumFloats);

size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int idx = 0; idx < 8; ++idx) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size");
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    size_t mult = 1;
    if (s.back() == 'K') mult = 1024;
    if (s.back() == 'M') mult = 1024 * 1024;
    const size_t v = std::stoull(s) * mult;
    if (v > best) best = v;
  }
  if (best == 0) {
    const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v > 0) best = size_t(v);
  }
  return best;
}

std::vector<double> measure_read_bandwidth(size_t bytes, int reps) {
  const size_t n = bytes / sizeof(float);
  AlignedBuffer<float> buf(n);
  // Non-zero content so nothing can be skipped; written in parallel to spread first touch.
  constexpr size_t kChunk = 1 << 20;  // floats per work item, fixed
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t end = std::min(n, size_t(c + 1) * kChunk);
    for (size_t i = size_t(c) * kChunk; i < end; ++i) buf[i] = float(i & 7);
  }
  std::vector<double> out;
  volatile float sink = 0.0f;
  for (int r = -1; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0.0f;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t c = 0; c < chunks; ++c) {
      const size_t begin = size_t(c) * kChunk;
      total += HWY_DYNAMIC_DISPATCH(SumFloats)(buf.data() + begin, std::min(kChunk, n - begin));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    if (r >= 0) out.push_back(double(n * sizeof(float)) / s / 1e9);
  }
  return out;
}

}  // namespace vq
#endif
