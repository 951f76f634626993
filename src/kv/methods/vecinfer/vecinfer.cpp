// VecInfer (outlier-suppressed product vector quantization of the KV cache, with attention from a
// lookup table of query-centroid products):
//
//   vecinfer:ksub=4,kbits=8,vsub=8,vbits=8[,seed=S]      (keys 8/ksub bits, values 8/vsub bits)
//
// Keys: each channel divided by a smoothing factor learned from calibration keys (outlier
// suppression: lambda_c = sqrt(max |k_c|), normalized to a geometric mean of 1, equal on the two
// channels of a RoPE pair so that smoothing commutes with the rotary embedding the keys already
// carry), then a randomized Hadamard rotation, then product quantization: the head vector is cut
// into sub-vectors of ksub coordinates, each stored as the index of its nearest centroid in a
// codebook of 2^kbits centroids learned per layer and sub-vector by k-means on calibration keys.
// Values: the same without smoothing (rotation, then sub-vectors of vsub coordinates).
//
// Encoding is the nearest-centroid search with the running minimum in registers (codebook_kernels.h).
// Scoring is the lookup-table form: once per step and query head, the table of <q'_s, c> for every
// sub-vector s and centroid c (q' = H D (lambda * q), so q.k = q'.(H D (k / lambda))), quantized to
// bytes (codebook_kernels.h: lut_u8_prepare); a token's score is then bias + step * the sum of its
// n_sub table bytes (lut_u8_scores: vpermb or vpermi2b lookups of 64 tokens on AVX-512 VBMI).
// Values accumulate each token's attention weight on its centroids (tables of per-centroid sums,
// four query rows at a time) and multiply the codebook once per run of kLutWeightRun tokens, the
// run length the codec asks attention for (lut_centroid_accumulate; short runs, prefill's tiles,
// add decoded values instead); the accumulator is head_dim floats per row in the rotated space,
// and finalize undoes the rotation.
//
// Deviations, stated: the smoothing rule (square root of the channel's maximum magnitude) and the
// rotation seed shared by all layers (calibration sees a layer's samples without its index) are
// this project's choices; indices are stored a byte each, so kbits and vbits are 8 (256
// centroids), the paper's setting; the score table is held in bytes (each entry within half a
// step of the float table, see codebook_kernels.h), where the paper keeps it in float. Codebooks are
// codec parameters: counted in the cache's memory, not in bits per element (a per-layer
// constant, independent of context length).
//
// Layout: blocks of 64 tokens, the index bytes sub-vector-major ([s][64 tokens]), so 64 tokens'
// indices of one sub-vector are one AVX-512 load. Bits per element: 8/ksub (keys), 8/vsub (values).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "src/core/hadamard.h"
#include "src/core/rng.h"
#include "src/core/threads.h"
#include "src/kv/registry.h"
#include "src/kv/rope_table.h"
#include "src/kv/rotation.h"
#include "src/kv/kernels/codebook_kernels.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {
namespace {

constexpr int kBlockTokens = kLutBlockTokens;  // 64
constexpr int kCentroids = kLutCentroids;      // 256
constexpr int kMaxDim = kLutMaxDim;  // the largest head (check_hadamard_dim), as the kernels assume
constexpr int64_t kMaxSamples = 8192;  // vectors k-means learns from, per layer and side
constexpr int kKmeansRounds = 16;

// Rotations of keys and values, shared by all layers (calibration does not know the layer).
uint64_t side_seed(uint64_t seed, int side) { return layer_seed(seed, 0, side); }

// A codebook: n_sub sub-vectors of `sub` coordinates, kCentroids centroids each, [s][c][j]; kept
// also transposed per sub-vector ([s][j][c]) with squared norms for the search.
class Codebook {
 public:
  Codebook(int d, int sub, std::vector<float> centroids)
      : sub_(sub), n_sub_(d / sub), c_(std::move(centroids)), t_(c_.size()), norms_(size_t(n_sub_) * kCentroids) {
    for (int s = 0; s < n_sub_; ++s) {
      for (int c = 0; c < kCentroids; ++c) {
        double nn = 0;
        for (int j = 0; j < sub_; ++j) {
          const float v = at(s, c)[j];
          t_[(size_t(s) * sub_ + j) * kCentroids + c] = v;
          nn += double(v) * v;
        }
        norms_[size_t(s) * kCentroids + c] = float(nn);
      }
    }
  }
  int sub() const { return sub_; }
  int n_sub() const { return n_sub_; }
  const float* at(int s, int c) const { return c_.data() + (size_t(s) * kCentroids + c) * sub_; }
  const float* transposed() const { return t_.data(); }  // [s][j][c]
  uint8_t nearest(int s, const float* x) const {
    return uint8_t(nearest_centroid(t_.data() + size_t(s) * sub_ * kCentroids, norms_.data() + size_t(s) * kCentroids,
                                    kCentroids, sub_, x));
  }
  size_t bytes() const { return (c_.size() + t_.size() + norms_.size()) * sizeof(float); }

 private:
  int sub_, n_sub_;
  std::vector<float> c_, t_, norms_;
};

// k-means (Lloyd's algorithm) of n vectors of `sub` floats into kCentroids centroids, from
// centroids spread over a seeded shuffle; an emptied cluster takes the vector farthest from its
// centroid. Deterministic.
std::vector<float> kmeans(const std::vector<float>& x, int64_t n, int sub, uint64_t seed) {
  VQ_CHECK(n >= kCentroids, fmt::format("vecinfer calibration: {} vectors, at least {} needed", n, kCentroids));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[rng.next_u64() % uint64_t(i + 1)]);
  std::vector<float> c(size_t(kCentroids) * sub);
  for (int k = 0; k < kCentroids; ++k) {
    const int64_t i = order[size_t((int64_t(k) * n) / kCentroids)];
    std::copy_n(x.data() + size_t(i) * sub, sub, c.data() + size_t(k) * sub);
  }
  std::vector<int> assign(static_cast<size_t>(n));
  for (int round = 0; round <= kKmeansRounds; ++round) {
    const Codebook book(sub, sub, c);
    for (int64_t i = 0; i < n; ++i) assign[size_t(i)] = book.nearest(0, x.data() + size_t(i) * sub);
    if (round == kKmeansRounds) break;
    std::vector<double> sum(c.size(), 0.0);
    std::vector<int64_t> count(kCentroids, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int a = assign[size_t(i)];
      ++count[size_t(a)];
      for (int j = 0; j < sub; ++j) sum[size_t(a) * sub + j] += x[size_t(i) * sub + j];
    }
    for (int k = 0; k < kCentroids; ++k) {
      if (count[size_t(k)] > 0) {
        for (int j = 0; j < sub; ++j) c[size_t(k) * sub + j] = float(sum[size_t(k) * sub + j] / double(count[size_t(k)]));
        continue;
      }
      int64_t far = 0;
      double far_d = -1;
      for (int64_t i = 0; i < n; ++i) {
        double dd = 0;
        for (int j = 0; j < sub; ++j) dd += std::pow(double(x[size_t(i) * sub + j]) - c[size_t(assign[size_t(i)]) * sub + j], 2);
        if (dd > far_d) {
          far_d = dd;
          far = i;
        }
      }
      std::copy_n(x.data() + size_t(far) * sub, sub, c.data() + size_t(k) * sub);
      assign[size_t(far)] = k;
    }
  }
  return c;
}

// The codebook of every sub-vector from n rows of d floats (each row already transformed).
std::vector<float> learn_codebook(const std::vector<float>& rows, int64_t n, int d, int sub, uint64_t seed) {
  const int n_sub = d / sub;
  std::vector<std::vector<float>> books(static_cast<size_t>(n_sub));
  parallel_for(n_sub, [&](int64_t s) {
    std::vector<float> x(size_t(n) * sub);
    for (int64_t i = 0; i < n; ++i) std::copy_n(rows.data() + size_t(i) * d + size_t(s) * sub, sub, x.data() + size_t(i) * sub);
    books[size_t(s)] = kmeans(x, n, sub, seed + uint64_t(s));
  });
  std::vector<float> out;
  for (auto& b : books) out.insert(out.end(), b.begin(), b.end());
  return out;
}

// At most kMaxSamples of the n rows, evenly spaced, each transformed by fn(row).
template <typename Fn>
std::vector<float> sample_rows(const std::vector<float>& all, int64_t n, int d, int64_t* taken, Fn fn) {
  const int64_t m = std::min(n, kMaxSamples);
  std::vector<float> out(size_t(m) * d);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = (i * n) / m;
    float* y = out.data() + size_t(i) * d;
    std::copy_n(all.data() + size_t(r) * d, d, y);
    fn(r, y);
  }
  *taken = m;
  return out;
}

struct Settings {
  int ksub, vsub;
  uint64_t seed;
};

void check_codebook(const CodecContext& ctx, const std::vector<float>& book, const char* side) {
  VQ_CHECK(ctx.calib != nullptr,
           "vecinfer needs a calibration: make one with `veloxquant calibrate --kv SPEC` and pass it with --calib FILE");
  VQ_CHECK_DATA(book.size() == size_t(ctx.head_dim) * kCentroids,
                fmt::format("the calibration of layer {} has no {} codebook for head size {}", ctx.layer, side,
                            ctx.head_dim));
}

class VecInferKeyCodec final : public KeyCodec {
 public:
  VecInferKeyCodec(const CodecContext& ctx, const Settings& s)
      : d_(ctx.head_dim), book_(ctx.head_dim, s.ksub, ctx.calib->key_codebook), smooth_(ctx.calib->key_smooth),
        rot_(size_t(ctx.head_dim), side_seed(s.seed, 0)) {
    VQ_CHECK_DATA(int(smooth_.size()) == d_,
                  fmt::format("the calibration of layer {} has no key smoothing for head size {}", ctx.layer, d_));
  }
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return size_t(book_.n_sub()) * kBlockTokens; }
  size_t param_bytes() const override { return book_.bytes() + smooth_.size() * sizeof(float) + rot_.bytes(); }
  void encode(const float* keys, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t) encode_token(keys + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* key, int64_t, int slot, uint8_t* block) const override {
    float y[kMaxDim];
    for (int j = 0; j < d_; ++j) y[j] = key[j] / smooth_[size_t(j)];
    rot_.forward(y);
    for (int s = 0; s < book_.n_sub(); ++s) block[size_t(s) * kBlockTokens + slot] = book_.nearest(s, y + s * book_.sub());
  }
  void decode(const uint8_t* block, int64_t, float* keys) const override {
    for (int t = 0; t < kBlockTokens; ++t) {
      float* y = keys + size_t(t) * d_;
      for (int s = 0; s < book_.n_sub(); ++s) {
        std::copy_n(book_.at(s, block[size_t(s) * kBlockTokens + t]), book_.sub(), y + s * book_.sub());
      }
      rot_.inverse(y);
      for (int j = 0; j < d_; ++j) y[j] *= smooth_[size_t(j)];
    }
  }
  size_t query_state_floats() const override { return lut_u8_state_floats(book_.n_sub()); }
  // One row is a block of one (prepare_queries below).
  void prepare_query(const float* q, float* state, Workspace& ws) const override {
    prepare_queries(q, 0, 1, state, 0, ws);
  }
  // All rows smoothed and turned, then their tables built four rows per pass over the codebook;
  // each state with prepare_query's bits.
  void prepare_queries(const float* q, size_t q_stride, int n, float* states, size_t state_stride,
                       Workspace& ws) const override {
    float* const y = ws.get<float>(Workspace::kCodec0, size_t(n) * size_t(d_));
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j < d_; ++j) y[size_t(r) * d_ + size_t(j)] = q[size_t(r) * q_stride + size_t(j)] * smooth_[size_t(j)];
    }
    rot_.forward_rows(y, size_t(n), size_t(d_));
    lut_u8_prepare_rows(book_.transposed(), book_.n_sub(), book_.sub(), y, size_t(d_), n, states, state_stride, ws);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace&) const override {
    lut_u8_scores(states, query_state_floats(), n_q, book_.n_sub(), blocks, block_bytes(), i0, i1, out, out_stride);
  }

 private:
  int d_;
  Codebook book_;
  std::vector<float> smooth_;
  RandomizedHadamard rot_;
};

// In the rotated space (the rotate_values wrapper rotates values in and the output back).
class VecInferValueCodec final : public ValueCodec {
 public:
  VecInferValueCodec(const CodecContext& ctx, const Settings& s)
      : d_(ctx.head_dim), book_(ctx.head_dim, s.vsub, ctx.calib->value_codebook) {}
  int head_dim() const override { return d_; }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return size_t(book_.n_sub()) * kBlockTokens; }
  size_t param_bytes() const override { return book_.bytes(); }
  void encode(const float* values, int64_t pos0, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t) encode_token(values + size_t(t) * d_, pos0 + t, t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* value, int64_t, int slot, uint8_t* block) const override {
    for (int s = 0; s < book_.n_sub(); ++s) {
      block[size_t(s) * kBlockTokens + slot] = book_.nearest(s, value + s * book_.sub());
    }
  }
  void decode(const uint8_t* block, int64_t, float* values) const override {
    for (int t = 0; t < kBlockTokens; ++t) {
      for (int s = 0; s < book_.n_sub(); ++s) {
        std::copy_n(book_.at(s, block[size_t(s) * kBlockTokens + t]), book_.sub(),
                    values + size_t(t) * d_ + s * book_.sub());
      }
    }
  }
  size_t accum_floats() const override { return size_t(d_); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace&) const override {
    lut_centroid_accumulate(w, w_stride, n_q, book_.n_sub(), book_.sub(), book_.at(0, 0), blocks, block_bytes(), i0,
                            i1, acc, size_t(d_));
  }
  int64_t preferred_run_tokens() const override { return kLutWeightRun; }
  void finalize(const float* acc, int n_q, float* out) const override { std::copy_n(acc, size_t(n_q) * d_, out); }

 private:
  int d_;
  Codebook book_;
};

class VecInferMethod final : public WindowedMethod {
 public:
  explicit VecInferMethod(const ParamValues& v)
      : WindowedMethod(v), s_{param_int(v, "ksub"), param_int(v, "vsub"), uint64_t(param_int(v, "seed"))} {}
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    check_dim(ctx.head_dim);
    check_codebook(ctx, ctx.calib ? ctx.calib->key_codebook : std::vector<float>{}, "key");
    return std::make_unique<VecInferKeyCodec>(ctx, s_);
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    check_dim(ctx.head_dim);
    check_codebook(ctx, ctx.calib ? ctx.calib->value_codebook : std::vector<float>{}, "value");
    return rotate_values(std::make_unique<VecInferValueCodec>(ctx, s_), side_seed(s_.seed, 1));
  }
  double key_bits(int) const override { return 8.0 / s_.ksub; }
  double value_bits(int) const override { return 8.0 / s_.vsub; }
  bool needs_calibration() const override { return true; }

  // Smoothing divisors from the keys as the cache will see them (after RoPE), the two channels
  // of a RoPE pair sharing theirs; then the codebooks of the smoothed, rotated keys.
  void calibrate_keys(const LayerSamples& smp, LayerCalibration* out) const override {
    const int d = smp.head_dim;
    check_dim(d);
    const int64_t n = smp.n_tokens * smp.n_kv_heads;
    VQ_CHECK(smp.positions.size() == size_t(smp.n_tokens), "vecinfer calibration: samples without positions");
    const RopeTable rope(d, smp.rope);
    const auto post_rope = [&](int64_t r, float* y) { rope.rotate(y, smp.positions[size_t(r / smp.n_kv_heads)], false); };
    std::vector<double> mx(static_cast<size_t>(d), 0.0);
    std::vector<float> y(static_cast<size_t>(d));
    for (int64_t r = 0; r < n; ++r) {
      std::copy_n(smp.keys.data() + size_t(r) * d, d, y.data());
      post_rope(r, y.data());
      for (int j = 0; j < d; ++j) mx[size_t(j)] = std::max(mx[size_t(j)], double(std::fabs(y[size_t(j)])));
    }
    if (!rope.identity()) {
      for (int i = 0; i < d / 2; ++i) {
        const double m = std::max(mx[size_t(rope.first(i))], mx[size_t(rope.second(i))]);
        mx[size_t(rope.first(i))] = mx[size_t(rope.second(i))] = m;
      }
    }
    double log_mean = 0;
    for (double& m : mx) log_mean += std::log(m = std::sqrt(std::max(m, 1e-6)));
    const double g = std::exp(log_mean / d);
    out->key_smooth.resize(size_t(d));
    for (int j = 0; j < d; ++j) out->key_smooth[size_t(j)] = std::clamp(float(mx[size_t(j)] / g), 1e-4f, 1e4f);
    const RandomizedHadamard rot(size_t(d), side_seed(s_.seed, 0));
    int64_t m = 0;
    const std::vector<float> rows = sample_rows(smp.keys, n, d, &m, [&](int64_t r, float* x) {
      post_rope(r, x);
      for (int j = 0; j < d; ++j) x[j] /= out->key_smooth[size_t(j)];
      rot.forward(x);
    });
    out->key_codebook = learn_codebook(rows, m, d, s_.ksub, s_.seed * 31 + 1);
  }

  void calibrate_values(const LayerSamples& smp, LayerCalibration* out) const override {
    const int d = smp.head_dim;
    check_dim(d);
    const RandomizedHadamard rot(size_t(d), side_seed(s_.seed, 1));
    int64_t m = 0;
    const std::vector<float> rows =
        sample_rows(smp.values, smp.n_tokens * smp.n_kv_heads, d, &m, [&](int64_t, float* x) { rot.forward(x); });
    out->value_codebook = learn_codebook(rows, m, d, s_.vsub, s_.seed * 31 + 2);
  }

 private:
  void check_dim(int d) const {
    check_hadamard_dim("vecinfer", d, 4);
    VQ_CHECK(d % s_.ksub == 0 && d % s_.vsub == 0,
             fmt::format("vecinfer: ksub={} and vsub={} must divide head_dim {}", s_.ksub, s_.vsub, d));
  }
  Settings s_;
};

}  // namespace

const MethodDef& vecinfer_method() {
  static const MethodDef def{
      {"vecinfer",
       "VecInfer: smoothed, Hadamard-rotated keys and rotated values, product-quantized with calibrated codebooks; "
       "attention from a query-centroid lookup table",
       rotated_method_params({
             {"ksub", ParamType::kInt, 4, 1, 64, "key sub-vector length (key bits per element: kbits / ksub)", {}},
             {"kbits", ParamType::kInt, 8, 8, 8, "bits of a key centroid index (256 centroids)", {}},
             {"vsub", ParamType::kInt, 8, 1, 64, "value sub-vector length (value bits per element: vbits / vsub)", {}},
             {"vbits", ParamType::kInt, 8, 8, 8, "bits of a value centroid index (256 centroids)", {}},
         })},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<VecInferMethod>(v); }};
  return def;
}

}  // namespace vq::kv
