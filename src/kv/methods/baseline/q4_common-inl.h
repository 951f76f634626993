// The pieces q4's key and value kernels share (q4_key_kernels.cpp, q4_value_kernels.cpp): vector
// types, rows per pass, and the join of two byte planes' sums. Per-target code: included inside
// each kernel file's HWY_NAMESPACE, once per target (the guard toggles with Highway's loop).
#if defined(VQ_KV_Q4_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VQ_KV_Q4_COMMON_INL_H_
#undef VQ_KV_Q4_COMMON_INL_H_
#else
#define VQ_KV_Q4_COMMON_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "src/kv/methods/baseline/q4_layout.h"

HWY_BEFORE_NAMESPACE();
namespace vq::kv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VU = hn::Vec<DU>;
using DI = hn::RebindToSigned<DF>;
using VI = hn::Vec<DI>;
typedef int32_t AliasedI32 __attribute__((may_alias));
constexpr int kLanes = int(hn::MaxLanes(DF()));
constexpr int kParts = q4::kBlockTokens / kLanes;  // vectors per 16 tokens
static_assert(q4::kBlockTokens % kLanes == 0, "16 tokens must be whole vectors");

// Query rows per pass of either kernel: two on AVX2, whose 16 registers hold two rows' sums for
// both vectors of a block (scores) or of a 16-channel chunk (values), so that each broadcast
// serves two products; four with 16 lanes. kPassRows<kRows> of them for a kernel of kRows rows.
constexpr int kRowsPerPass = kParts >= 2 ? 2 : 4;
template <int kRows>
constexpr int kPassRows = kRows < kRowsPerPass ? kRows : kRowsPerPass;

// A run's or group's integer sum from its two byte planes: hi * 256 + lo.
HWY_INLINE VI JoinPlanes(VI hi, VI lo) { return hn::Add(hn::ShiftLeft<8>(hi), lo); }

}  // namespace HWY_NAMESPACE
}  // namespace vq::kv
HWY_AFTER_NAMESPACE();

#endif  // the per-target guard
