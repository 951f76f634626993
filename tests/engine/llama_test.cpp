// The llama/qwen2 path without a download: a test writes a small random llama-architecture GGUF
// (grouped-query attention, QKV bias for qwen2, tied or separate output) and checks the engine's
// logits against an independent plain forward pass in double precision written here.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "src/core/fp16.h"
#include "src/core/rng.h"
#include "src/engine/session.h"
#include "tests/engine/gguf_writer.h"

namespace vq::engine {
namespace {

using testing::GgufWriter;

constexpr int E = 64, H = 4, HKV = 2, D = E / H, FF = 96, L = 2;

struct Mat {
  int rows = 0, cols = 0;
  std::vector<float> w;  // as the engine sees them (after fp16 rounding for F16 tensors)
  bool f16 = false;      // stored as F16: products take the activations rounded to fp16, as llama.cpp's do
};

struct Synthetic {
  std::string arch;
  int vocab = 0;
  Mat embd, out;
  bool tied = true;
  std::vector<float> out_norm;
  struct Layer {
    std::vector<float> attn_norm, ffn_norm, bq, bk, bv;
    Mat wq, wk, wv, wo, gate, up, down;
  };
  std::vector<Layer> layers;
};

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Random matrix stored as F16 (rounded values kept for the reference) or F32.
Mat random_mat(Rng& rng, int rows, int cols, bool f16, GgufWriter& w, const std::string& name) {
  Mat m{rows, cols, std::vector<float>(size_t(rows) * cols)};
  const float s = 1.0f / std::sqrt(float(cols));
  for (auto& x : m.w) x = float(rng.normal()) * s;
  m.f16 = f16;
  if (f16) {
    std::vector<uint8_t> b(m.w.size() * 2);
    for (size_t i = 0; i < m.w.size(); ++i) {
      const uint16_t h = f32_to_f16(m.w[i]);
      m.w[i] = f16_to_f32(h);
      std::memcpy(&b[2 * i], &h, 2);
    }
    w.tensor(name, {uint64_t(cols), uint64_t(rows)}, 1, b);
  } else {
    w.tensor(name, {uint64_t(cols), uint64_t(rows)}, 0, f32_bytes(m.w));
  }
  return m;
}

std::vector<float> random_vec(Rng& rng, int n, float mean, float sd, GgufWriter& w, const std::string& name) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = mean + float(rng.normal()) * sd;
  w.tensor(name, {uint64_t(n)}, 0, f32_bytes(v));
  return v;
}

Synthetic write_model(const std::string& path, const std::string& arch, bool tied) {
  Synthetic m;
  m.arch = arch;
  m.tied = tied;
  GgufWriter w;
  w.kv_str("general.architecture", arch);
  w.kv_u32(arch + ".block_count", L);
  w.kv_u32(arch + ".embedding_length", E);
  w.kv_u32(arch + ".feed_forward_length", FF);
  w.kv_u32(arch + ".attention.head_count", H);
  w.kv_u32(arch + ".attention.head_count_kv", HKV);
  w.kv_u32(arch + ".context_length", 256);
  w.kv_f32(arch + ".rope.freq_base", 10000.0f);
  w.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.push_back(buf);
    types.push_back(6);
  }
  for (const char* t : {"\xe2\x96\x81", "a", "b", "c", "\xe2\x96\x81" "a", "ab", "abc", "\xe2\x96\x81" "ab"}) {
    toks.push_back(t);
    types.push_back(1);
  }
  std::vector<float> scores(toks.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -float(i);
  m.vocab = int(toks.size());
  w.kv_str("tokenizer.ggml.model", "llama");
  w.kv_str_array("tokenizer.ggml.tokens", toks);
  w.kv_f32_array("tokenizer.ggml.scores", scores);
  w.kv_i32_array("tokenizer.ggml.token_type", types);
  w.kv_u32("tokenizer.ggml.bos_token_id", 1);
  w.kv_u32("tokenizer.ggml.eos_token_id", 2);
  Rng rng(arch == "qwen2" ? 11 : 7);
  m.embd = random_mat(rng, m.vocab, E, true, w, "token_embd.weight");
  m.out_norm = random_vec(rng, E, 1.0f, 0.1f, w, "output_norm.weight");
  if (!tied) m.out = random_mat(rng, m.vocab, E, false, w, "output.weight");
  const bool bias = arch == "qwen2";
  for (int l = 0; l < L; ++l) {
    const auto n = [l](const char* s) { return "blk." + std::to_string(l) + "." + s; };
    Synthetic::Layer ly;
    ly.attn_norm = random_vec(rng, E, 1.0f, 0.1f, w, n("attn_norm.weight"));
    ly.ffn_norm = random_vec(rng, E, 1.0f, 0.1f, w, n("ffn_norm.weight"));
    ly.wq = random_mat(rng, H * D, E, true, w, n("attn_q.weight"));
    ly.wk = random_mat(rng, HKV * D, E, false, w, n("attn_k.weight"));
    ly.wv = random_mat(rng, HKV * D, E, true, w, n("attn_v.weight"));
    ly.wo = random_mat(rng, E, H * D, true, w, n("attn_output.weight"));
    if (bias) {
      ly.bq = random_vec(rng, H * D, 0.0f, 0.5f, w, n("attn_q.bias"));
      ly.bk = random_vec(rng, HKV * D, 0.0f, 0.5f, w, n("attn_k.bias"));
      ly.bv = random_vec(rng, HKV * D, 0.0f, 0.5f, w, n("attn_v.bias"));
    }
    ly.gate = random_mat(rng, FF, E, true, w, n("ffn_gate.weight"));
    ly.up = random_mat(rng, FF, E, false, w, n("ffn_up.weight"));
    ly.down = random_mat(rng, E, FF, true, w, n("ffn_down.weight"));
    m.layers.push_back(ly);
  }
  GgufWriter::save(path, w.bytes());
  return m;
}

// ---- the independent reference, in double precision ----
using Vec = std::vector<double>;

Vec matvec(const Mat& m, const Vec& x) {
  Vec y(static_cast<size_t>(m.rows), 0.0);
  Vec xr = x;
  if (m.f16 && m.cols % 32 == 0) {
    for (double& v : xr) v = f16_to_f32(f32_to_f16(float(v)));
  }
  for (int r = 0; r < m.rows; ++r) {
    for (int c = 0; c < m.cols; ++c) y[r] += double(m.w[size_t(r) * m.cols + c]) * xr[c];
  }
  return y;
}

Vec rmsnorm(const Vec& x, const std::vector<float>& w) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / double(x.size()) + 1e-5);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
  return y;
}

void rope(Vec& x, int heads, int64_t pos, bool neox) {
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < D / 2; ++i) {
      const double theta = double(pos) * std::pow(10000.0, -2.0 * i / D);
      const int a = neox ? h * D + i : h * D + 2 * i;
      const int b = neox ? h * D + i + D / 2 : h * D + 2 * i + 1;
      const double x0 = x[a], x1 = x[b];
      x[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
      x[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
  }
}

double to_f16(double v) { return f16_to_f32(f32_to_f16(float(v))); }  // the fp16 cache

std::vector<Vec> reference_logits(const Synthetic& m, const std::vector<int32_t>& ids) {
  const bool neox = m.arch == "qwen2";
  const int T = int(ids.size());
  std::vector<Vec> x(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) x[t] = Vec(m.embd.w.begin() + size_t(ids[t]) * E, m.embd.w.begin() + size_t(ids[t] + 1) * E);
  for (const auto& ly : m.layers) {
    std::vector<Vec> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)), v(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) {
      const Vec h = rmsnorm(x[t], ly.attn_norm);
      q[t] = matvec(ly.wq, h);
      k[t] = matvec(ly.wk, h);
      v[t] = matvec(ly.wv, h);
      for (size_t i = 0; i < ly.bq.size(); ++i) q[t][i] += ly.bq[i];
      for (size_t i = 0; i < ly.bk.size(); ++i) k[t][i] += ly.bk[i], v[t][i] += ly.bv[i];
      rope(q[t], H, t, neox);
      rope(k[t], HKV, t, neox);
      for (auto& e : k[t]) e = to_f16(e);
      for (auto& e : v[t]) e = to_f16(e);
    }
    for (int t = 0; t < T; ++t) {
      Vec att(static_cast<size_t>(H * D), 0.0);
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / HKV);
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int j = 0; j < D; ++j) dot += q[t][h * D + j] * k[u][g * D + j];
          s[u] = dot / std::sqrt(double(D));
          mx = std::max(mx, s[u]);
        }
        double sum = 0;
        for (auto& e : s) sum += e = std::exp(e - mx);
        for (int u = 0; u <= t; ++u) {
          for (int j = 0; j < D; ++j) att[h * D + j] += s[u] / sum * v[u][g * D + j];
        }
      }
      const Vec o = matvec(ly.wo, att);
      for (int i = 0; i < E; ++i) x[t][i] += o[i];
      const Vec h2 = rmsnorm(x[t], ly.ffn_norm);
      const Vec gt = matvec(ly.gate, h2), up = matvec(ly.up, h2);
      Vec a(static_cast<size_t>(FF));
      for (int i = 0; i < FF; ++i) a[i] = gt[i] / (1.0 + std::exp(-gt[i])) * up[i];
      const Vec dn = matvec(ly.down, a);
      for (int i = 0; i < E; ++i) x[t][i] += dn[i];
    }
  }
  std::vector<Vec> out;
  for (int t = 0; t < T; ++t) out.push_back(matvec(m.tied ? m.embd : m.out, rmsnorm(x[t], m.out_norm)));
  return out;
}

void check(const std::string& arch, bool tied, int ubatch) {
  SCOPED_TRACE(arch + (tied ? " tied" : " untied") + " ubatch " + std::to_string(ubatch));
  const std::string path = ::testing::TempDir() + "/synthetic_" + arch + ".gguf";
  const Synthetic syn = write_model(path, arch, tied);
  const auto model = Model::load(path);
  EXPECT_EQ(model->config().n_head_kv, HKV);
  const std::vector<int32_t> ids = {1, 266, 263, 265, 3 + 'x', 264, 260, 261, 262, 3 + '!', 259, 263};
  Session s(*model, kv::parse_method("fp16"), 64, ubatch);
  std::vector<float> all;
  s.feed(ids, nullptr, &all);
  const auto ref = reference_logits(syn, ids);
  for (size_t t = 0; t < ids.size(); ++t) {
    double num = 0, den = 0;
    for (int i = 0; i < syn.vocab; ++i) {
      num = std::max(num, std::fabs(all[t * syn.vocab + i] - ref[t][i]));
      den = std::max(den, std::fabs(ref[t][i]));
    }
    // F16 products round their activations to fp16 in both, but a value the two compute a little
    // differently can round to the neighbouring fp16 (2^-11 apart), and such differences grow
    // through the layers: hence 1e-3 rather than the 1e-4 of float products alone.
    EXPECT_LT(num / den, 1e-3) << "position " << t;
  }
}

TEST(SyntheticLlama, MatchesPlainReference) {
  check("llama", true, 512);
  check("llama", false, 5);
}

TEST(SyntheticQwen2, QkvBiasAndNeoxRopeMatchPlainReference) {
  check("qwen2", true, 512);
  check("qwen2", false, 1);
}

TEST(SyntheticLlama, TokenizerUsesMergesAndByteFallback) {
  const std::string path = ::testing::TempDir() + "/synthetic_tok.gguf";
  write_model(path, "llama", true);
  const auto model = Model::load(path);
  const auto ids = model->tokenizer().encode("abc ab z", false);
  // No add_space_prefix key: SentencePiece's default adds one, so the text is "▁abc▁ab▁z".
  // "▁a" outscores "ab" and merges first, then "▁ab"; "z" is not in the vocabulary and falls
  // back to its byte token <0x7A>.
  EXPECT_EQ(ids, (std::vector<int32_t>{266, 262, 266, 259, 3 + 'z'}));
}

}  // namespace
}  // namespace vq::engine
