// Micro-benchmarks generated from the registry: encode, fused scores and fused value
// accumulation of every method on one run of blocks (4 query rows, as in 4:1 GQA decode).
// Methods that learn from calibration data learn from the benchmark's own vectors.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "src/core/rng.h"
#include "src/kv/calib/calibrate.h"
#include "veloxquant/kv/method.h"

namespace {

constexpr int kDim = 128;
constexpr int kTokens = 4096;
constexpr int kRows = 4;

struct Fixture {
  std::unique_ptr<vq::kv::KeyCodec> kc;
  std::unique_ptr<vq::kv::ValueCodec> vc;
  std::shared_ptr<const vq::kv::Calibration> calib;
  std::vector<float> x, states, w;
  std::vector<uint8_t> kb, vb;
  explicit Fixture(const std::string& spec) {
    vq::Rng rng(1);
    x.resize(size_t(kTokens) * kDim);
    for (auto& v : x) v = float(rng.normal());
    const vq::kv::Method m = vq::kv::parse_method(spec);
    vq::kv::CodecContext ctx{kDim, 0};
    if (m.needs_calibration()) {
      // One KV head without RoPE; the same vectors serve as keys and values.
      const vq::kv::LayerConfig layer{1, kDim, 0};
      calib = vq::kv::calibrate_on_synthetic(m, layer, x.data(), x.data(), kTokens, 1, "codec_bench");
      ctx.calib = &calib->layers[0];
    }
    kc = m.keys().key_codec(ctx);
    vc = m.values().value_codec(ctx);
    kb.resize(size_t(kTokens / kc->block_tokens()) * kc->block_bytes());
    vb.resize(size_t(kTokens / vc->block_tokens()) * vc->block_bytes());
    for (int b = 0; b < kTokens / kc->block_tokens(); ++b) {
      kc->encode(&x[size_t(b) * kc->block_tokens() * kDim], 0, &kb[size_t(b) * kc->block_bytes()]);
    }
    for (int b = 0; b < kTokens / vc->block_tokens(); ++b) {
      vc->encode(&x[size_t(b) * vc->block_tokens() * kDim], 0, &vb[size_t(b) * vc->block_bytes()]);
    }
    states.resize(kRows * kc->query_state_floats());
    for (int r = 0; r < kRows; ++r) kc->prepare_query(&x[size_t(r) * kDim], &states[r * kc->query_state_floats()]);
    w.assign(size_t(kRows) * kTokens, 1.0f / kTokens);
  }
};

void BM_Encode(benchmark::State& st, std::string spec) {
  Fixture f(spec);
  std::vector<uint8_t> out(f.kc->block_bytes());
  int64_t t = 0;
  for (auto _ : st) {
    f.kc->encode(&f.x[size_t(t % (kTokens / f.kc->block_tokens())) * f.kc->block_tokens() * kDim], 0, out.data());
    benchmark::DoNotOptimize(out.data());
    ++t;
  }
  st.SetItemsProcessed(st.iterations() * f.kc->block_tokens());
}

// Scores and accumulation of the whole run, in calls of `tile` tokens (attention makes calls of
// 256 tokens in decode).
void BM_Scores(benchmark::State& st, std::string spec, int64_t tile) {
  Fixture f(spec);
  std::vector<float> s(size_t(kRows) * kTokens);
  for (auto _ : st) {
    for (int64_t a = 0; a < kTokens; a += tile) {
      f.kc->scores(f.states.data(), kRows, f.kb.data(), 0, a, a + tile, s.data() + a, kTokens);
    }
    benchmark::DoNotOptimize(s.data());
  }
  st.SetItemsProcessed(st.iterations() * kTokens);
  st.SetBytesProcessed(st.iterations() * int64_t(f.kb.size()));
}

void BM_Accumulate(benchmark::State& st, std::string spec, int64_t tile) {
  Fixture f(spec);
  std::vector<float> acc(size_t(kRows) * f.vc->accum_floats());
  for (auto _ : st) {
    for (int64_t a = 0; a < kTokens; a += tile) {
      f.vc->accumulate(f.w.data() + a, kTokens, kRows, f.vb.data(), 0, a, a + tile, acc.data());
    }
    benchmark::DoNotOptimize(acc.data());
  }
  st.SetItemsProcessed(st.iterations() * kTokens);
  st.SetBytesProcessed(st.iterations() * int64_t(f.vb.size()));
}

const int registered = [] {
  for (const vq::kv::MethodDef* def : vq::kv::registered_methods()) {
    // RateQuant's codecs are its base's at per-layer widths from a calibration: benchmark the base.
    if (def->info.name == "ratequant") continue;
    // The rotated form too, for the methods that offer rotation as an option.
    std::vector<std::string> specs{def->info.name};
    const auto& params = def->info.params;
    if (std::any_of(params.begin(), params.end(), [](const vq::kv::ParamInfo& p) { return p.name == "rot"; })) {
      specs.push_back(def->info.name + ":rot=1");
    }
    // Settings that take kernels of their own: one-bit values (per-channel token planes) and the
    // fractional split (two part codecs per group).
    if (def->info.name == "turbo") specs.insert(specs.end(), {"turbo:bits=1", "turbo:bits=2,outliers=64"});
    // KVQuant without its sparse outliers: what the outlier slots cost beside the dense codes.
    if (def->info.name == "kvquant") specs.push_back("kvquant:outliers=0");
    for (const std::string& spec : specs) {
      benchmark::RegisterBenchmark(("encode/" + spec).c_str(), BM_Encode, spec);
      benchmark::RegisterBenchmark(("scores/" + spec).c_str(), BM_Scores, spec, kTokens);
      benchmark::RegisterBenchmark(("accumulate/" + spec).c_str(), BM_Accumulate, spec, kTokens);
      benchmark::RegisterBenchmark(("scores256/" + spec).c_str(), BM_Scores, spec, 256);
      benchmark::RegisterBenchmark(("accumulate256/" + spec).c_str(), BM_Accumulate, spec, 256);
    }
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
