// TurboQuant-Prod (Zandieh et al., "TurboQuant: Online Vector Quantization with Near-optimal
// Distortion Rate", ICLR 2026, https://arxiv.org/abs/2504.19874, Algorithm 2), the inner-product
// stage:
//
//   turbo-prod:bits=B[,m=M,seed=S,residual=R,sink=N]
//
// A vector x (key or value) is stored as TurboQuant-MSE at B-1 bits (turbo.cpp: fp16 norm,
// randomized Hadamard rotation, Lloyd–Max codes of the unit direction u, giving u_hat) plus a
// 1-bit QJL sketch of the residual r = u - u_hat: the signs of S r (S an m x d Gaussian sketch per
// layer and side, qjl_sketch.h) and ||r|| in fp16. Everything lives in the rotated space, so with
// q' the rotated query,
//   <q, x> ~= ||x|| (<q', u_hat> + sqrt(pi/2) / m * ||r|| * <S q', sign(S r)>),
// unbiased (the MSE part is exact given the codes, the sketch part is QJL's unbiased estimate of
// <q', r>), with variance ||x||^2 ((pi/2) ||q||^2 ||r||^2 - <q', r>^2) / m given the rotation.
// Scores use that estimator directly: q' and S q' are computed once per step (prepare_query); each
// token costs the MSE part's dot product (tiles decoded through the level table) and one sign-select
// sum over m entries. The decode is its linear form ||x|| (u_hat + sqrt(pi/2)/m ||r|| S^T sign(S r)),
// used by values: accumulation keeps d floats for the MSE parts and m floats for the weighted sign
// vectors, and S^T is applied once per step in finalize.
//
// Deviations: the rotation is the randomized Hadamard transform for power-of-two head dims (as
// turbo.cpp; the dense random orthogonal matrix for others); the paper's S is d x d, here m rows
// (default m = head_dim, the paper's choice; a multiple of 8); B = 1 (sketch only, no MSE stage) is
// not offered; norms are fp16, clamped to its largest finite value.
//
// Layout: 16 tokens per block, per token fp16 ||x||, fp16 ||r||, the MSE codes as B-1 bit planes of
// ceil(d/8) bytes, then m/8 bytes of signs. Bits per element: (B - 1) + m/d + 32/d (d a multiple of
// 8), the same for keys and values. Where d and m are multiples of 32 the same bytes take
// TurboQuant's lane layout instead (ProdLanes below): the MSE part, then the signs as a one-bit
// part whose scale is ||x|| ||r|| in one fp16 (a deviation: the product of the two fp16 norms,
// rounded once more), so that both terms run through the lane kernels.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "src/core/fp16.h"
#include "src/core/hadamard.h"
#include "src/kv/calib/lloyd_max.h"
#include "src/kv/calib/nuq.h"
#include "src/kv/kernels/decode_tiles.h"
#include "src/kv/kernels/f16_kernels.h"
#include "src/kv/kernels/lut_kernels.h"
#include "src/kv/methods/qjl/qjl_sketch.h"
#include "src/kv/methods/turbo/turbo_lanes.h"
#include "src/kv/methods/turbo/turbo_rows.h"
#include "src/kv/registry.h"
#include "src/kv/rotation.h"
#include "veloxquant/error.h"

namespace vq::kv {
namespace {

using qjl::kQjlScale;

constexpr int kBlockTokens = kTurboBlockTokens;

size_t prod_row_bytes(int d, int bits, int m) { return 4 + size_t(bits - 1) * plane_bytes(d) + size_t(m) / 8; }

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The MSE stage exactly as turbo.cpp codes it, so its codes are TurboQuant-MSE's at B-1 bits:
// the codes of x's unit direction u, the residual r = u - u_hat, and both norms in fp16.
struct MseStage {
  uint16_t norm, residual_norm;
};
MseStage code_mse_stage(const float* x, int d, const std::vector<float>& levels, const std::vector<float>& mids,
                        uint8_t* codes, float* r) {
  double ss = 0;
  for (int j = 0; j < d; ++j) ss += double(x[j]) * x[j];
  const float norm = float(std::sqrt(ss));
  const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
  double rr = 0;
  for (int j = 0; j < d; ++j) {
    const float u = x[j] * inv;
    codes[j] = uint8_t(nearest_level(mids.data(), int(mids.size()), u));
    r[j] = u - levels[codes[j]];
    rr += double(r[j]) * r[j];
  }
  return {f32_to_f16(std::min(norm, 65504.0f)), f32_to_f16(float(std::sqrt(rr)))};
}

// One token of an already rotated vector: norm, residual norm, MSE codes, residual signs.
class ProdRows {
 public:
  ProdRows(int d, int bits, int m, uint64_t sketch_seed)
      : d_(d), mse_bits_(bits - 1), m_(m), levels_(lloyd_max_sphere(d, bits - 1).levels),
        mids_(level_midpoints(levels_)), sketch_(m, d, sketch_seed), row_(prod_row_bytes(d, bits, m)) {}
  int head_dim() const { return d_; }
  size_t row_bytes() const { return row_; }
  int m() const { return m_; }
  const qjl::GaussianSketch& sketch() const { return sketch_; }

  void encode(const float* x, uint8_t* row) const {
    uint8_t codes[4096];
    std::vector<float> r(static_cast<size_t>(d_)), p(static_cast<size_t>(m_));
    const MseStage st = code_mse_stage(x, d_, levels_, mids_, codes, r.data());
    std::memcpy(row, &st.norm, 2);
    std::memcpy(row + 2, &st.residual_norm, 2);
    pack_planes(codes, d_, mse_bits_, row + 4);
    sketch_.project(r.data(), m_, p.data());
    qjl::pack_signs(p.data(), m_, row + signs_offset());
  }
  // ||x|| u_hat: the MSE part alone.
  void decode_mse(const uint8_t* row, float* x) const {
    lut_affine_planes(row + 4, d_, mse_bits_, levels_.data(), 0.0f, load_f16(row), x);
  }
  // The coefficient of S^T sign(S r) in the decode: ||x|| sqrt(pi/2)/m ||r||.
  float sketch_coef(const uint8_t* row) const { return load_f16(row) * float(kQjlScale / m_) * load_f16(row + 2); }
  const uint8_t* signs(const uint8_t* row) const { return row + signs_offset(); }
  void decode(const uint8_t* row, float* x) const {
    decode_mse(row, x);
    sketch_.add_transposed_signs(sketch_coef(row), signs(row), m_, x);
  }

  template <typename Fn>
  void mse_tiles(const uint8_t* blocks, int64_t i0, int64_t i1, Workspace& ws, Fn fn) const {
    decode_tiles(
        i0, i1, d_, ws, [&](int64_t i, float* x) { decode_mse(token(blocks, i), x); }, fn);
  }
  const uint8_t* token(const uint8_t* blocks, int64_t i) const {
    return blocks + size_t(i / kBlockTokens) * kBlockTokens * row_ + size_t(i % kBlockTokens) * row_;
  }
  size_t param_bytes() const { return (levels_.size() + mids_.size()) * sizeof(float) + sketch_.bytes(); }

 private:
  size_t signs_offset() const { return 4 + size_t(mse_bits_) * plane_bytes(d_); }
  int d_, mse_bits_, m_;
  std::vector<float> levels_, mids_;
  qjl::GaussianSketch sketch_;
  size_t row_;
};

class ProdKeyCodec final : public RowBlockCodec<KeyCodec, ProdRows> {
 public:
  ProdKeyCodec(int d, int bits, int m, uint64_t sketch_seed)
      : RowBlockCodec(ProdRows(d, bits, m, sketch_seed)), d_(d) {}
  // q' (rotated by the wrapper) and S q'.
  size_t query_state_floats() const override { return size_t(d_) + size_t(rows().m()); }
  // One row is a block of one (prepare_queries below).
  void prepare_query(const float* q, float* state, Workspace& ws) const override {
    prepare_queries(q, 0, 1, state, 0, ws);
  }
  void prepare_queries(const float* q, size_t q_stride, int n, float* states, size_t state_stride,
                       Workspace&) const override {
    for (int r = 0; r < n; ++r) std::copy_n(q + size_t(r) * q_stride, d_, states + size_t(r) * state_stride);
    rows().sketch().project_rows(q, q_stride, n, states + d_, state_stride);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace& ws) const override {
    const size_t qs = query_state_floats();
    rows().mse_tiles(blocks, i0, i1, ws, [&](int64_t a, int64_t n, const float* tile) {
      float_scores(states, n_q, qs, tile, size_t(d_), n, d_, out + (a - i0), out_stride);
    });
    const int bytes = rows().m() / 8;
    for (int64_t i = i0; i < i1; ++i) {
      const uint8_t* row = rows().token(blocks, i);
      const float coef = rows().sketch_coef(row);
      const uint8_t* bits = rows().signs(row);
      for (int r = 0; r < n_q; ++r) {
        out[size_t(r) * out_stride + size_t(i - i0)] += coef * qjl::sign_dot(states + size_t(r) * qs + d_, bits, bytes);
      }
    }
  }

 private:
  int d_;
};

class ProdValueCodec final : public RowBlockCodec<ValueCodec, ProdRows> {
 public:
  ProdValueCodec(int d, int bits, int m, uint64_t sketch_seed)
      : RowBlockCodec(ProdRows(d, bits, m, sketch_seed)), d_(d) {}
  // d floats for the MSE parts, then m floats of weighted signs (S^T applied once, in finalize).
  size_t accum_floats() const override { return size_t(d_) + size_t(rows().m()); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace& ws) const override {
    const size_t as = accum_floats();
    rows().mse_tiles(blocks, i0, i1, ws, [&](int64_t a, int64_t n, const float* tile) {
      float_accumulate(w + (a - i0), w_stride, n_q, tile, size_t(d_), n, d_, acc, as);
    });
    const int bytes = rows().m() / 8;
    for (int64_t i = i0; i < i1; ++i) {
      const uint8_t* row = rows().token(blocks, i);
      const float coef = rows().sketch_coef(row);
      const uint8_t* bits = rows().signs(row);
      for (int r = 0; r < n_q; ++r) {
        qjl::sign_axpy(w[size_t(r) * w_stride + size_t(i - i0)] * coef, bits, bytes, acc + size_t(r) * as + d_);
      }
    }
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    const size_t as = accum_floats();
    for (int r = 0; r < n_q; ++r) std::copy_n(acc + size_t(r) * as, d_, out + size_t(r) * d_);
    rows().sketch().add_transposed_rows(acc + d_, as, n_q, out, size_t(d_));
  }

 private:
  int d_;
};

// The lane layout, where head_dim and m are multiples of 32 (turbo_lanes.h): a block of 16 tokens
// is the MSE codes as a lane part with the tokens' ||x|| as its scales, then the residual's signs
// as a one-bit lane part of m coordinates whose scales are ||x|| ||r|| (one fp16, the product of
// the two fp16 norms the rows keep, rounded once more) and whose levels are -+sqrt(pi/2)/m. The
// sketch term of a score is then that part's score against S q', and its decode S^T of the part's
// decode: both parts go through the lane kernels (at one bit the keys' nibble tables and the
// values' token planes). Bytes are the rows': two fp16 per token, the codes, m/8 bytes of signs.
class ProdLanes {
 public:
  ProdLanes(int d, int bits, int m, uint64_t sketch_seed, bool values)
      : d_(d), m_(m), levels_(lloyd_max_sphere(d, bits - 1).levels), mids_(level_midpoints(levels_)),
        sketch_(m, d, sketch_seed), mse_(d, bits - 1, levels_, values),
        signs_(m, 1, {-float(kQjlScale / m), float(kQjlScale / m)}, values) {}
  static bool apply(int d, int bits, int m) { return turbo_lanes_apply(d, bits - 1) && turbo_lanes_apply(m, 1); }
  int d() const { return d_; }
  int m() const { return m_; }
  const qjl::GaussianSketch& sketch() const { return sketch_; }
  const TurboLanePart& mse() const { return mse_; }
  const TurboLanePart& signs() const { return signs_; }
  size_t block_bytes() const { return mse_.bytes() + signs_.bytes(); }
  size_t param_bytes() const { return (levels_.size() + mids_.size()) * sizeof(float) + sketch_.bytes(); }

  void encode_token(const float* x, int slot, uint8_t* block) const { encode_tokens(x, slot, 1, block); }
  // n tokens into slots slot..: the residuals' sketches several per pass over S, each with a
  // single token's bits (qjl_sketch.h).
  void encode_tokens(const float* x, int slot, int n, uint8_t* block) const {
    std::vector<uint8_t> codes(size_t(n) * d_);
    std::vector<MseStage> st(static_cast<size_t>(n));
    std::vector<float> r(size_t(n) * d_), p(size_t(n) * m_);
    for (int t = 0; t < n; ++t) {
      const size_t at = size_t(t) * d_;
      st[size_t(t)] = code_mse_stage(x + at, d_, levels_, mids_, codes.data() + at, r.data() + at);
    }
    sketch_.project_rows(r.data(), size_t(d_), n, p.data(), size_t(m_));
    uint8_t bits[4096];
    for (int t = 0; t < n; ++t) {
      const float coef = f16_to_f32(st[size_t(t)].norm) * f16_to_f32(st[size_t(t)].residual_norm);
      const float* pt = p.data() + size_t(t) * m_;
      for (int i = 0; i < m_; ++i) bits[i] = pt[i] > 0.0f ? 1 : 0;  // as qjl::pack_signs
      mse_.put(codes.data() + size_t(t) * d_, st[size_t(t)].norm, slot + t, block);
      signs_.put(bits, f32_to_f16(std::min(coef, 65504.0f)), slot + t, block + mse_.bytes());
    }
  }
  // The 16 tokens' ||x|| u_hat + ||x|| ||r|| sqrt(pi/2)/m S^T sign(S r).
  void decode(const uint8_t* block, float* x) const {
    std::vector<float> z(size_t(kBlockTokens) * m_);
    mse_.decode(block, x);
    signs_.decode(block + mse_.bytes(), z.data());
    for (int t = 0; t < kBlockTokens; ++t) sketch_.add_transposed(z.data() + size_t(t) * m_, x + size_t(t) * d_);
  }

 private:
  int d_, m_;
  std::vector<float> levels_, mids_;
  qjl::GaussianSketch sketch_;
  TurboLanePart mse_, signs_;
};

template <typename Base>
class ProdLaneCodec : public Base {
 public:
  ProdLaneCodec(int d, int bits, int m, uint64_t sketch_seed, bool values) : lanes_(d, bits, m, sketch_seed, values) {}
  int head_dim() const override { return lanes_.d(); }
  int block_tokens() const override { return kBlockTokens; }
  size_t block_bytes() const override { return lanes_.block_bytes(); }
  size_t param_bytes() const override { return lanes_.param_bytes(); }
  void encode(const float* x, int64_t, uint8_t* block) const override {
    for (int t = 0; t < kBlockTokens; ++t) lanes_.encode_token(x + size_t(t) * lanes_.d(), t, block);
  }
  bool encodes_single_tokens() const override { return true; }
  void encode_token(const float* x, int64_t, int slot, uint8_t* block) const override {
    lanes_.encode_token(x, slot, block);
  }
  void encode_tokens(const float* x, int64_t, int slot, int n, uint8_t* block) const override {
    lanes_.encode_tokens(x, slot, n, block);
  }
  void decode(const uint8_t* block, int64_t, float* x) const override { lanes_.decode(block, x); }

 protected:
  const ProdLanes& lanes() const { return lanes_; }

 private:
  ProdLanes lanes_;
};

// Keys: the prepared state is the MSE part's (q', or its nibble tables at one bit) then the sign
// part's, prepared from S q'.
class ProdLaneKeyCodec final : public ProdLaneCodec<KeyCodec> {
 public:
  ProdLaneKeyCodec(int d, int bits, int m, uint64_t sketch_seed) : ProdLaneCodec(d, bits, m, sketch_seed, false) {}
  size_t query_state_floats() const override {
    return lanes().mse().query_state_floats() + lanes().signs().query_state_floats();
  }
  // One row is a block of one (prepare_queries below).
  void prepare_query(const float* q, float* state, Workspace& ws) const override {
    prepare_queries(q, 0, 1, state, 0, ws);
  }
  void prepare_queries(const float* q, size_t q_stride, int n, float* states, size_t state_stride,
                       Workspace&) const override {
    const int m = lanes().m();
    static thread_local std::vector<float> sq;  // kept per thread: prefill prepares every block of rows
    sq.resize(size_t(n) * size_t(m));
    lanes().sketch().project_rows(q, q_stride, n, sq.data(), size_t(m));
    for (int r = 0; r < n; ++r) {
      float* state = states + size_t(r) * state_stride;
      lanes().mse().prepare_query(q + size_t(r) * q_stride, state);
      lanes().signs().prepare_query(sq.data() + size_t(r) * m, state + lanes().mse().query_state_floats());
    }
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1, float* out,
              size_t out_stride, Workspace&) const override {
    const size_t qs = query_state_floats();
    lanes().mse().scores(states, qs, n_q, blocks, block_bytes(), i0, i1, out, out_stride);
    lanes().signs().add_scores(states + lanes().mse().query_state_floats(), qs, n_q, blocks + lanes().mse().bytes(),
                               block_bytes(), i0, i1, out, out_stride);
  }
};

// Values: d floats for the MSE parts, then m floats of weighted signs (S^T applied once, in
// finalize), as the rows' codec.
class ProdLaneValueCodec final : public ProdLaneCodec<ValueCodec> {
 public:
  ProdLaneValueCodec(int d, int bits, int m, uint64_t sketch_seed) : ProdLaneCodec(d, bits, m, sketch_seed, true) {}
  size_t accum_floats() const override { return size_t(lanes().d()) + size_t(lanes().m()); }
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t, int64_t i0, int64_t i1,
                  float* acc, Workspace&) const override {
    const size_t as = accum_floats();
    lanes().mse().accumulate(w, w_stride, n_q, blocks, block_bytes(), i0, i1, acc, as);
    lanes().signs().accumulate(w, w_stride, n_q, blocks + lanes().mse().bytes(), block_bytes(), i0, i1,
                               acc + lanes().d(), as);
  }
  void finalize(const float* acc, int n_q, float* out) const override {
    const size_t as = accum_floats();
    const int d = lanes().d();
    for (int r = 0; r < n_q; ++r) std::copy_n(acc + size_t(r) * as, d, out + size_t(r) * d);
    lanes().sketch().add_transposed_rows(acc + d, as, n_q, out, size_t(d));
  }
};

class ProdMethod final : public RotatedMethod {
 public:
  explicit ProdMethod(const ParamValues& v)
      : RotatedMethod(v), bits_(param_int(v, "bits")), m_(param_int(v, "m")) {
    VQ_CHECK(m_ % 8 == 0, fmt::format("turbo-prod: m must be a multiple of 8 (whole bytes of signs), got {}", m_));
  }
  std::unique_ptr<KeyCodec> key_codec(const CodecContext& ctx) const override {
    return rotate_keys(codec<KeyCodec, ProdLaneKeyCodec, ProdKeyCodec>(ctx, 0), rotation_seed(ctx.layer, 0));
  }
  std::unique_ptr<ValueCodec> value_codec(const CodecContext& ctx) const override {
    return rotate_values(codec<ValueCodec, ProdLaneValueCodec, ProdValueCodec>(ctx, 1), rotation_seed(ctx.layer, 1));
  }
  double key_bits(int d) const override { return bits(d); }
  double value_bits(int d) const override { return bits(d); }

 private:
  // The side's codec before its rotation: the lane layout where it applies, rows otherwise.
  template <typename Base, typename Lanes, typename Rows>
  std::unique_ptr<Base> codec(const CodecContext& ctx, int side) const {
    const int m = rows(ctx.head_dim);
    const uint64_t seed = qjl::sketch_seed(rotation_seed(ctx.layer, side));
    if (ProdLanes::apply(ctx.head_dim, bits_, m)) return std::make_unique<Lanes>(ctx.head_dim, bits_, m, seed);
    return std::make_unique<Rows>(ctx.head_dim, bits_, m, seed);
  }
  int sketch_rows(int d) const { return m_ > 0 ? m_ : d; }
  double bits(int d) const { return 8.0 * double(prod_row_bytes(d, bits_, sketch_rows(d))) / d; }
  // Checks the head dimension and returns the sketch's rows.
  int rows(int d) const {
    check_rotation_dim("turbo-prod", d, 4);
    const int m = sketch_rows(d);
    VQ_CHECK(m % 8 == 0, fmt::format("turbo-prod: m = head_dim = {} is not a multiple of 8; give m", d));
    return m;
  }
  int bits_, m_;
};

}  // namespace

const MethodDef& turbo_prod_method() {
  static const MethodDef def{
      {"turbo-prod",
       "TurboQuant-Prod: TurboQuant-MSE at bits-1 + a 1-bit QJL sketch of the residual (unbiased inner products)",
       windowed_method_params({
           {"bits", ParamType::kInt, 3, 2, 4, "bits per coordinate: bits-1 of MSE codes + the residual's sketch", {}},
           {"m", ParamType::kInt, 0, 0, 4096, "sketch rows of the residual, a multiple of 8 (0: head_dim)", {}},
           {"seed", ParamType::kInt, 1234, 0, 2147483647, "seed of the rotation's signs and of the sketch", {}},
       })},
      [](const ParamValues& v) -> std::unique_ptr<MethodImpl> { return std::make_unique<ProdMethod>(v); }};
  return def;
}

}  // namespace vq::kv
