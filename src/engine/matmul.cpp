// Float-product matmul for many tokens: items of 16 weight rows (boundaries fixed by the shape).
// F16 and BF16 rows are read as stored by tiles of 4 rows x 6 tokens; the other float-product types are
// dequantized once into a thread-local panel, then 4 rows x 4 tokens tiles (Tile, either way).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/engine/matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/engine/matmul.h"

#include <type_traits>
#include <vector>

#include "src/core/aligned_buffer.h"
#include "src/core/fp16.h"
#include "src/core/threads.h"
#include "src/engine/dequant.h"
#include "src/engine/qdot.h"
#include "src/engine/quants.h"

HWY_BEFORE_NAMESPACE();
namespace vq::engine {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// y[t * y_stride + r] = dot(w_r, x_t) for kR rows and kT tokens: one accumulator per (row, token)
// over the row's chunks in order, then the sum of its lanes (and, for float rows whose length is
// no multiple of the vector, the rest in scalar order). That is the arithmetic of DotHalfT
// (dequant.cpp), which decode runs on the same values, so a token's product does not depend on
// how many tokens share the matmul or on the tile's shape. WT is float (a dequantized panel), or
// hwy::float16_t or hwy::bfloat16_t (F16 or BF16 rows as stored, widened in registers: half the
// bytes through L2 of a panel; their length is a multiple of 32, so they have no rest).
template <int kR, int kT, typename WT>
HWY_INLINE void Tile(const WT* HWY_RESTRICT w, size_t w_stride, const float* HWY_RESTRICT x, size_t x_stride,
                     int64_t cols, float* HWY_RESTRICT y, size_t y_stride) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t N = int64_t(hn::Lanes(df));
  using V = hn::Vec<decltype(df)>;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const hn::RebindToUnsigned<decltype(df)> du;
  auto load_w = [&](const WT* p) HWY_ATTR {
    if constexpr (std::is_same_v<WT, float>) {
      return hn::LoadU(df, p);
    } else if constexpr (std::is_same_v<WT, hwy::bfloat16_t>) {  // the top half of a float
      return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p)))));
    } else {
      return hn::PromoteTo(df, hn::LoadU(dh, p));
    }
  };
  V acc[kR][kT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = hn::Zero(df);
  }
  int64_t c = 0;
  for (; c + N <= cols; c += N) {
    V xv[kT];
    for (int t = 0; t < kT; ++t) xv[t] = hn::LoadU(df, x + t * x_stride + c);
    for (int r = 0; r < kR; ++r) {
      const V wv = load_w(w + r * w_stride + c);
      for (int t = 0; t < kT; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[r][t]));
      if constexpr (std::is_same_v<WT, float>) {
        for (int64_t k = c; k < cols; ++k) s += w[r * w_stride + k] * x[t * x_stride + k];
      }
      y[t * y_stride + r] = s;
    }
  }
}

// n_rows rows times kT tokens (x rows cols apart): tiles of 4 rows, then one of the rest.
template <int kT, typename WT>
HWY_INLINE void RowsTimesTokens(const WT* w, size_t w_stride, int n_rows, int64_t cols, const float* x, float* y,
                                int64_t y_stride) {
  const size_t xs = size_t(cols), ys = size_t(y_stride);
  int r = 0;
  for (; r + 4 <= n_rows; r += 4) Tile<4, kT>(w + r * w_stride, w_stride, x, xs, cols, y + r, ys);
  switch (n_rows - r) {
    case 3: Tile<3, kT>(w + r * w_stride, w_stride, x, xs, cols, y + r, ys); break;
    case 2: Tile<2, kT>(w + r * w_stride, w_stride, x, xs, cols, y + r, ys); break;
    case 1: Tile<1, kT>(w + r * w_stride, w_stride, x, xs, cols, y + r, ys); break;
    default: break;
  }
}

// The last n_left (at most kT) tokens as one tile's width.
template <int kT, typename WT>
HWY_INLINE void RowsTimesLastTokens(int n_left, const WT* w, size_t w_stride, int n_rows, int64_t cols, const float* x,
                                    float* y, int64_t y_stride) {
  if constexpr (kT >= 1) {
    if (n_left == kT) return RowsTimesTokens<kT>(w, w_stride, n_rows, cols, x, y, y_stride);
    RowsTimesLastTokens<kT - 1>(n_left, w, w_stride, n_rows, cols, x, y, y_stride);
  }
}

// n_rows rows (w_stride elements apart) times n_tok activation rows; y row-major [tok][y_stride].
// The rows stay in L1/L2 while each group of kT tokens passes.
template <int kT, typename WT>
HWY_INLINE void RowsTimesAllTokens(const WT* w, size_t w_stride, int n_rows, int64_t cols, const float* x,
                                   int64_t n_tok, float* y, int64_t y_stride) {
  int64_t t = 0;
  for (; t + kT <= n_tok; t += kT) RowsTimesTokens<kT>(w, w_stride, n_rows, cols, x + t * cols, y + t * y_stride, y_stride);
  if (t < n_tok) RowsTimesLastTokens<kT - 1>(int(n_tok - t), w, w_stride, n_rows, cols, x + t * cols, y + t * y_stride, y_stride);
}

// A dequantized panel of n_rows rows (stride cols) times all tokens, in tiles of 4 x 4.
void PanelTimesTokens(const float* panel, int n_rows, int64_t cols, const float* x, int64_t n_tok, float* y,
                      int64_t y_stride) {
  RowsTimesAllTokens<4>(panel, size_t(cols), n_rows, cols, x, n_tok, y, y_stride);
}

// F16 or BF16 rows as stored (w_stride elements apart; cols a multiple of 32) times activations
// (rounded to fp16 for F16 rows), in tiles of 4 rows x 6 tokens where there are 32 vector registers (10 loads per 24
// multiply-adds, against the panel's 8 per 16) and 4 x 3 in AVX2's 16. The activations stay
// floats: widening them in the tile too costs a conversion per token and chunk, which measured
// slower (performance.md, "Prefill's weight tiles").
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int kHalfTileTokens = 6;
#else
constexpr int kHalfTileTokens = 3;
#endif
void HalfRowsTimesAllTokens(const uint16_t* w16, size_t w_stride, int n_rows, int64_t cols, const float* x,
                            int64_t n_tok, float* y, int64_t y_stride, bool bf16) {
  if (bf16) {
    RowsTimesAllTokens<kHalfTileTokens>(reinterpret_cast<const hwy::bfloat16_t*>(w16), w_stride, n_rows, cols, x, n_tok,
                                        y, y_stride);
  } else {
    RowsTimesAllTokens<kHalfTileTokens>(reinterpret_cast<const hwy::float16_t*>(w16), w_stride, n_rows, cols, x, n_tok,
                                        y, y_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace vq::engine
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace vq::engine {
HWY_EXPORT(PanelTimesTokens);
HWY_EXPORT(HalfRowsTimesAllTokens);

namespace {
constexpr int kPanelRows = 16;

// Weights with an integer kernel (qdot.h): the activations are quantized once, then every row
// meets them in byte products. The input of such a product, prepared once for every matrix that
// reads it:
struct QuantizedInput {
  const uint8_t* acts = nullptr;
  size_t stride = 0;
  const float* table = nullptr;  // each group of kQDotMaxTokens tokens' block scales (qdot_row's act_scales)
  int64_t table_floats = 0;
};

QuantizedInput quantize_input(ActQuant aq, const float* x, int64_t cols, int64_t n_tok) {
  QuantizedInput in;
  in.stride = act_row_bytes(aq, cols);
  // The calling thread's buffers; the lambdas take their addresses, since a thread_local named
  // inside them would be each worker's own.
  thread_local std::vector<uint8_t> buffer;
  buffer.resize(in.stride * size_t(n_tok));
  uint8_t* acts = buffer.data();
  auto quantize = [&](int64_t t) { quantize_activations(aq, x + t * cols, cols, acts + size_t(t) * in.stride); };
  if (n_tok >= 16) {
    parallel_for(n_tok, quantize);
  } else {
    for (int64_t t = 0; t < n_tok; ++t) quantize(t);
  }
  in.acts = acts;
  const int64_t groups = (n_tok + kQDotMaxTokens - 1) / kQDotMaxTokens;
  // (Not for one or two tokens, a decode step's matmul: the kernels do not read it there.)
  in.table_floats = aq == ActQuant::kQ8_0 && n_tok > 2 ? cols / 32 * kQDotMaxTokens : 0;
  thread_local std::vector<float> tables;
  tables.resize(size_t(in.table_floats * groups));
  if (in.table_floats > 0) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t t0 = g * kQDotMaxTokens;
      act_scale_table(acts + size_t(t0) * in.stride, in.stride, int(std::min<int64_t>(kQDotMaxTokens, n_tok - t0)),
                      cols, tables.data() + g * in.table_floats);
    }
  }
  in.table = tables.data();
  return in;
}

constexpr int64_t kItemRows = 16;
int64_t items_of(const Weight& w) { return (w.rows + kItemRows - 1) / kItemRows; }

// Rows [16 item, 16 item + 16) of w times every token: decode (up to kQDotMaxTokens tokens, a step
// of as many sequences) streams each row from memory once for all tokens; prefill runs groups of
// kQDotMaxTokens tokens over the item, so that the group's activations stay in L1 while the item's
// rows come from L2.
void quantized_item(const Weight& w, const QuantizedInput& in, int64_t n_tok, int64_t item, float* y) {
  const int64_t r0 = item * kItemRows, r_end = std::min(w.rows, r0 + kItemRows);
  for (int64_t t0 = 0; t0 < n_tok; t0 += kQDotMaxTokens) {
    const int n = int(std::min<int64_t>(kQDotMaxTokens, n_tok - t0));
    const float* scales = in.table_floats > 0 ? in.table + t0 / kQDotMaxTokens * in.table_floats : nullptr;
    for (int64_t r = r0; r < r_end; ++r) {
      qdot_row(w.type, w.data + size_t(r) * w.row_bytes, w.cols, in.acts + size_t(t0) * in.stride, in.stride, n,
               y + t0 * w.rows + r, w.rows, scales);
    }
  }
}

// F16 weights meet the activations rounded to fp16, as llama.cpp's F16 products take them: decode
// (up to 4 tokens) reads them as fp16, half the bytes beside each streamed row; more tokens go
// through Tile with the same rounded values, and both sum a (row, token) pair the same way.
bool f16_rows(const Weight& w) { return GgmlType(w.type) == GgmlType::kF16 && w.cols % 32 == 0; }

const uint16_t* half_input(const float* x, size_t len) {
  thread_local AlignedVector<uint16_t> halves;
  halves.resize(len);
  f32_to_f16(x, halves.data(), len);
  return halves.data();
}

void f16_item(const Weight& w, const uint16_t* xh, int64_t n_tok, int64_t item, float* y) {
  const int64_t r_end = std::min(w.rows, (item + 1) * kItemRows);
  for (int64_t r = item * kItemRows; r < r_end; ++r) {
    dot_row_f16(w.data + size_t(r) * w.row_bytes, w.cols, xh, n_tok, y + r, w.rows);
  }
}

// The products of one or more matrices with the same x in one parallel pass over all their rows,
// x prepared once: quantized weights sharing an activation format (any number of tokens), or F16
// rows at decode. False, with nothing done, for any other mix.
bool matmul_in_one_pass(std::initializer_list<MatmulOut> outs, const float* x, int64_t n_tok) {
  const MatmulOut* o = outs.begin();
  const size_t k = outs.size();
  const ActQuant aq = act_quant_for(o[0].w->type);
  bool quantized = aq != ActQuant::kNone, f16 = n_tok <= 4 && f16_rows(*o[0].w);
  for (size_t i = 0; i < k; ++i) {
    quantized = quantized && act_quant_for(o[i].w->type) == aq && o[i].w->cols == o[0].w->cols;
    f16 = f16 && f16_rows(*o[i].w) && o[i].w->cols == o[0].w->cols;
  }
  if ((!quantized && !f16) || k > 8) return false;
  // The matrices' items one after another: first[i] is matrix i's first.
  int64_t first[9] = {0};
  for (size_t i = 0; i < k; ++i) first[i + 1] = first[i] + items_of(*o[i].w);
  auto owner = [&](int64_t item) {
    size_t i = 0;
    while (item >= first[i + 1]) ++i;
    return i;
  };
  if (quantized) {
    const QuantizedInput in = quantize_input(aq, x, o[0].w->cols, n_tok);
    parallel_for(first[k], [&](int64_t item) {
      const size_t i = owner(item);
      quantized_item(*o[i].w, in, n_tok, item - first[i], o[i].y);
    });
  } else {
    const uint16_t* xh = half_input(x, size_t(n_tok) * size_t(o[0].w->cols));
    parallel_for(first[k], [&](int64_t item) {
      const size_t i = owner(item);
      f16_item(*o[i].w, xh, n_tok, item - first[i], o[i].y);
    });
  }
  return true;
}

}  // namespace

void matmul(const Weight& w, const float* x, int64_t n_tok, float* y) {
  if (matmul_in_one_pass({{&w, y}}, x, n_tok)) return;
  // Up to 4 tokens of the other float-product types (BF16, Q4_1, Q5_1): dequantize and dot in one
  // pass with nothing written to memory; the weights stream from DRAM once.
  if (!f16_rows(w) && dot_row_supported(w.type, w.cols, n_tok)) {
    parallel_for(items_of(w), [&](int64_t item) {
      const int64_t r_end = std::min(w.rows, (item + 1) * kItemRows);
      for (int64_t r = item * kItemRows; r < r_end; ++r) {
        dot_row(w.type, w.data + size_t(r) * w.row_bytes, w.cols, x, n_tok, y + r, w.rows);
      }
    });
    return;
  }
  const bool bf16 = GgmlType(w.type) == GgmlType::kBF16 && w.cols % 32 == 0;
  if (f16_rows(w) || bf16) {
    const float* xr = x;
    if (!bf16) {  // F16 rows meet the activations rounded to fp16
      // Rounded token by token on every thread (a serial pass over a prompt's activations left the
      // other threads waiting for several percent of prefill).
      thread_local AlignedVector<float> rounded;
      rounded.resize(size_t(n_tok) * size_t(w.cols));
      float* xh = rounded.data();
      parallel_for(n_tok, [&](int64_t t) {
        thread_local AlignedVector<uint16_t> row;  // each worker's own
        row.resize(size_t(w.cols));
        f32_to_f16(x + t * w.cols, row.data(), size_t(w.cols));
        f16_to_f32(row.data(), xh + t * w.cols, size_t(w.cols));
      });
      xr = xh;
    }
    parallel_for(items_of(w), [&](int64_t item) {
      const int64_t r0 = item * kItemRows;
      const int n = int(std::min(kItemRows, w.rows - r0));
      HWY_DYNAMIC_DISPATCH(HalfRowsTimesAllTokens)(reinterpret_cast<const uint16_t*>(w.data + size_t(r0) * w.row_bytes),
                                                   size_t(w.cols), n, w.cols, xr, n_tok, y + r0, w.rows, bf16);
    });
    return;
  }
  // Few tokens: a small panel that stays in L1 (each dequantized row is used only n_tok times);
  // many tokens: a taller panel amortizes x's loads over more rows.
  const int64_t panel_rows = n_tok <= 4 ? 4 : kPanelRows;
  const int64_t items = (w.rows + panel_rows - 1) / panel_rows;
  parallel_for(items, [&](int64_t item) {
    thread_local std::vector<float> panel;
    const int64_t r0 = item * panel_rows;
    const int n = int(std::min<int64_t>(panel_rows, w.rows - r0));
    panel.resize(size_t(n) * size_t(w.cols));
    for (int i = 0; i < n; ++i) {
      dequantize_row(w.type, w.data + size_t(r0 + i) * w.row_bytes, panel.data() + size_t(i) * w.cols, w.cols);
    }
    HWY_DYNAMIC_DISPATCH(PanelTimesTokens)(panel.data(), n, w.cols, x, n_tok, y + r0, w.rows);
  });
}

void matmul_shared(std::initializer_list<MatmulOut> outs, const float* x, int64_t n_tok) {
  if (matmul_in_one_pass(outs, x, n_tok)) return;
  for (const MatmulOut& m : outs) matmul(*m.w, x, n_tok, m.y);
}

void matmul_reference(const Weight& w, const float* x, int64_t n_tok, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  // The activations as the integer kernels see them: quantized, then read back as floats.
  std::vector<float> xq(x, x + n_tok * w.cols);
  if (const ActQuant aq = act_quant_for(w.type); aq != ActQuant::kNone) {
    std::vector<uint8_t> q(act_row_bytes(aq, w.cols));
    for (int64_t t = 0; t < n_tok; ++t) {
      quantize_activations(aq, x + t * w.cols, w.cols, q.data());
      dequantize_activations(aq, q.data(), w.cols, xq.data() + t * w.cols);
    }
  }
  // F16 weights: the activations rounded to fp16 (matmul's rule).
  if (f16_rows(w)) {
    for (float& v : xq) v = f16_to_f32(f32_to_f16(v));
  }
  x = xq.data();
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row_scalar(w.type, w.data + size_t(r) * w.row_bytes, row.data(), w.cols);
    for (int64_t t = 0; t < n_tok; ++t) {
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c) s += double(row[size_t(c)]) * x[t * w.cols + c];
      y[t * w.rows + r] = float(s);
    }
  }
}

void weight_row(const Weight& w, int64_t r, float* out) {
  dequantize_row(w.type, w.data + size_t(r) * w.row_bytes, out, w.cols);
}

}  // namespace vq::engine
#endif
