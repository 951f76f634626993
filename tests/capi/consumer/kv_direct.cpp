// An installed-tree consumer in C++: drives the KV cache library of include/veloxquant/kv directly
// (append, attend, memory) and holds its attention to a naive float attention; checks that a bad
// spec arrives as a catchable vq::Error, and that the C header is usable from C++.
#include <veloxquant/error.h>
#include <veloxquant/kv/cache.h>
#include <veloxquant/kv/method.h>
#include <veloxquant/veloxquant.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int kKvHeads = 2, kHeads = 8, kDim = 64, kTokens = 300, kQueries = 2;

// Softmax attention in double for query token at `pos` (all positions up to it).
void naive(const float* q, const std::vector<float>& k, const std::vector<float>& v, int64_t pos, float scale,
           float* out) {
  for (int h = 0; h < kHeads; ++h) {
    const int g = h / (kHeads / kKvHeads);
    std::vector<double> s(size_t(pos) + 1);
    double mx = -INFINITY, sum = 0;
    for (int64_t t = 0; t <= pos; ++t) {
      double d = 0;
      for (int c = 0; c < kDim; ++c) d += double(q[h * kDim + c]) * k[size_t((t * kKvHeads + g) * kDim + c)];
      s[size_t(t)] = d * scale;
      mx = std::max(mx, s[size_t(t)]);
    }
    std::vector<double> acc(kDim, 0.0);
    for (int64_t t = 0; t <= pos; ++t) {
      const double w = std::exp(s[size_t(t)] - mx);
      sum += w;
      for (int c = 0; c < kDim; ++c) acc[size_t(c)] += w * v[size_t((t * kKvHeads + g) * kDim + c)];
    }
    for (int c = 0; c < kDim; ++c) out[h * kDim + c] = float(acc[size_t(c)] / sum);
  }
}

// Appends random keys and values to a one-layer cache of `spec` and returns the largest
// difference between its attention and the naive one.
float attention_error(const char* spec) {
  const vq::kv::Method method = vq::kv::parse_method(spec);
  vq::kv::KvCache cache(method, {vq::kv::LayerConfig(kKvHeads, kDim, 0)});
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> k(size_t(kTokens) * kKvHeads * kDim), v(k.size()), q(size_t(kQueries) * kHeads * kDim);
  for (auto& x : k) x = gauss(rng);
  for (auto& x : v) x = gauss(rng);
  for (auto& x : q) x = gauss(rng);
  cache.layer(0).append(k.data(), v.data(), kTokens);
  const int64_t pos[kQueries] = {kTokens - 2, kTokens - 1};
  const float scale = 1.0f / std::sqrt(float(kDim));
  std::vector<float> out(q.size()), want(q.size());
  cache.layer(0).attend(q.data(), kQueries, kHeads, pos, scale, out.data());
  for (int i = 0; i < kQueries; ++i) naive(&q[size_t(i) * kHeads * kDim], k, v, pos[i], scale, &want[size_t(i) * kHeads * kDim]);
  float err = 0;
  for (size_t i = 0; i < out.size(); ++i) err = std::max(err, std::fabs(out[i] - want[i]));
  const vq::kv::MemoryUsage mem = cache.memory();
  std::printf("%-8s %.3f bits/element, %zu bytes resident, max |fused - naive| = %.2e\n", method.spec().c_str(),
              method.bits_per_element(kDim), mem.total(), double(err));
  return err;
}

}  // namespace

int main() {
  int failures = 0;
  std::printf("libveloxquant %s\n", vq_version());
  if (std::strcmp(vq_version(), "0.1.0") != 0) ++failures;
  try {
    // fp16 storage rounds keys and values to half precision; q8 and KIVI quantize them.
    if (!(attention_error("fp16") < 2e-3f)) ++failures;
    if (!(attention_error("q8") < 3e-2f)) ++failures;
    if (!(attention_error("kivi:residual=32") < 0.5f)) ++failures;
  } catch (const vq::Error& e) {
    std::fprintf(stderr, "unexpected error: %s\n", e.what());
    return 1;
  }
  try {
    vq::kv::parse_method("kivi:kbits=9");
    std::fprintf(stderr, "a bad spec was accepted\n");
    ++failures;
  } catch (const vq::Error& e) {
    std::printf("bad spec refused: %s\n", e.what());
    if (e.kind() != vq::ErrorKind::kUsage) ++failures;
  }
  if (failures) std::fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
