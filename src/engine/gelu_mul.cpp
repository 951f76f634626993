// gelu_mul (ops.h) in vectors: ggml's GELU depends on x only through its fp16 rounding inside
// (-10, 10), so it is tabulated once for every fp16 value, as ggml does (ggml_table_gelu_f16), and
// each vector of gates is rounded to fp16 by the hardware conversion (round to nearest even, as
// f32_to_f16) and looked up with a gather. The same floats as gelu_ggml(gate) * up, element by
// element; a software rounding per element made this a visible share of Gemma's prefill
// (performance.md, "Prefill's weight tiles").
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/engine/gelu_mul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cmath>
#include <vector>

#include "src/core/fp16.h"
#include "src/engine/ops.h"

HWY_BEFORE_NAMESPACE();
namespace vq::engine {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void GeluMul(const float* table, const float* gate, const float* up, int64_t n, float* y) {
  int64_t i = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128  // (their emulated demotion truncates)
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto lo = hn::Set(df, -10.0f), hi = hn::Set(df, 10.0f);
  for (; i + N <= n; i += N) {
    const auto x = hn::LoadU(df, gate + i);
    const auto h = hn::BitCast(du16, hn::DemoteTo(dh, x));
    const auto looked = hn::GatherIndex(df, table, hn::BitCast(di, hn::PromoteTo(du, h)));
    auto g = hn::IfThenElse(hn::Ge(x, hi), x, looked);
    g = hn::IfThenZeroElse(hn::Le(x, lo), g);
    hn::StoreU(hn::Mul(g, hn::LoadU(df, up + i)), df, y + i);
  }
#endif
  for (; i < n; ++i) {
    const float x = gate[i];
    const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : table[f32_to_f16(x)];
    y[i] = g * up[i];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::engine
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::engine {
namespace {
// Entries for infinities and NaNs are 0: ±inf never reach the lookup (the ±10 tests take them), a
// NaN gate reads a NaN pattern's zero.
const float* gelu_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = f16_to_f32(uint16_t(h));
      t[h] = std::isfinite(x) ? gelu_of_half(x) : 0.0f;
    }
    return t;
  }();
  return table.data();
}
}  // namespace

HWY_EXPORT(GeluMul);

void gelu_mul(const float* gate, const float* up, int64_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(GeluMul)(gelu_table(), gate, up, n, y);
}

}  // namespace vq::engine
#endif
