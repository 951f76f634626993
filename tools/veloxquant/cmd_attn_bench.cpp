// `veloxquant attn-bench`: decode-attention speed of each method on synthetic keys and values,
// beside the machine's read bandwidth measured in the same run. Methods are timed interleaved
// (round-robin, several rounds) and each figure is the median of the rounds with min and max;
// the spread of the fp16 rows is the noise floor. The speed-up against fp16 is the median (min,
// max) of the per-round ratios, which cancels drift between rounds.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <memory>
#include <vector>

#include "src/core/bandwidth.h"
#include "src/core/rng.h"
#include "src/core/simd.h"
#include "src/core/threads.h"
#include "src/kv/calib/calibrate.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"

namespace vq::cli {
namespace {

struct Opts {
  int q_heads = 32, kv_heads = 8, head_dim = 128, layers = 16, threads = 2;
  int64_t ctx = 32768;
  int iters = 4, rounds = 5;
  uint64_t seed = 1;
  double bandwidth_mib = 0;  // 0: max(1 GiB, 4 x last-level cache)
  std::vector<std::string> kv;
  bool json = false;
  std::string simd = "best";
};

// Keys ~ N(0,1) except a few outlier channels per head with a large scale and offset, as in real
// models' keys; values ~ N(0,1). Layout [ctx][kv_heads][head_dim].
void synthetic_kv(const Opts& o, std::vector<float>* k, std::vector<float>* v) {
  const size_t n = size_t(o.ctx) * o.kv_heads * o.head_dim;
  k->resize(n);
  v->resize(n);
  Rng pick(o.seed);
  std::vector<float> kscale(size_t(o.kv_heads) * o.head_dim, 1.0f), koff(kscale.size(), 0.0f);
  for (int h = 0; h < o.kv_heads; ++h) {
    for (int i = 0; i < 4; ++i) {
      const size_t c = size_t(h) * o.head_dim + pick.below(uint64_t(o.head_dim));
      kscale[c] = float(8.0 + 8.0 * pick.uniform());
      koff[c] = float(pick.uniform() < 0.5 ? -6.0 : 6.0);
    }
  }
  // Generated in fixed pieces, each from its own seeded stream, in parallel.
  const int64_t pieces = (o.ctx + 255) / 256;
  const size_t row = size_t(o.kv_heads) * o.head_dim;
  parallel_for(pieces, [&](int64_t p) {
    Rng rng(o.seed * 7919 + uint64_t(p) + 1);
    const size_t begin = size_t(p) * 256 * row, end = std::min(n, size_t(p + 1) * 256 * row);
    for (size_t i = begin; i < end; ++i) {
      (*k)[i] = float(rng.normal()) * kscale[i % row] + koff[i % row];
      (*v)[i] = float(rng.normal());
    }
  });
}

struct Bench {
  std::string spec;
  std::unique_ptr<kv::KvCache> cache;
  double bits = 0;
  kv::MemoryUsage mem;
  std::vector<double> us_per_token;
};

}  // namespace

Runner add_attn_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("attn-bench", "Decode-attention speed per method on synthetic K/V");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--q-heads", o->q_heads, "Query heads")->check(CLI::Range(1, 1024));
  cmd->add_option("--kv-heads", o->kv_heads, "KV heads")->check(CLI::Range(1, 1024));
  cmd->add_option("--head-dim", o->head_dim, "Head dimension")->check(CLI::Range(1, 4096));
  cmd->add_option("--ctx", o->ctx, "Tokens in the cache")->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  cmd->add_option("--layers", o->layers,
                  "Layers (each its own cache; enough that the caches exceed the last-level cache)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--iters", o->iters, "Decode steps per timing")->check(CLI::Range(1, 1000000));
  cmd->add_option("--rounds", o->rounds, "Interleaved rounds over all methods")->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", o->seed, "Seed of the synthetic data");
  cmd->add_option("--bandwidth-mib", o->bandwidth_mib, "Buffer size of the bandwidth probe (MiB)");
  cmd->add_option("--kv", o->kv, "Method spec (repeatable); default: fp16 bf16 q8 q8:rot=1 q4 q4:rot=1 kivi kvquant turbo turbo:bits=2 turbo:bits=1 turbo:bits=2,outliers=64 turbo-rvq:bits=1 turbo-prod turbo-prod:bits=2 polar qjl rabitq rabitq:bits=2 vecinfer spectral (kvquant, vecinfer and spectral calibrated on the synthetic data; commvq is left out: its 12-bit-per-stage search makes filling a 32k cache take minutes)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_option("--simd", o->simd,
                  "Best SIMD target the kernels may use: best, avx3 or avx2 (to measure what a CPU without AVX-512, "
                  "or without its DL extensions, runs)");
  // Specs are checked before anything is allocated.
  cmd->callback([o]() {
    VQ_CHECK(o->q_heads % o->kv_heads == 0, fmt::format("--q-heads {} is not a multiple of --kv-heads {}",
                                                        o->q_heads, o->kv_heads));
    if (o->kv.empty()) {
      // The rotation family at each of its settings of 3 bits or fewer, beside its defaults.
      o->kv = {"fp16",          "bf16",
               "q8",            "q8:rot=1",
               "q4",            "q4:rot=1",
               "kivi",          "kvquant",
               "turbo",         "turbo:bits=2",
               "turbo:bits=1",  "turbo:bits=2,outliers=64",
               "turbo-rvq:bits=1", "turbo-prod",
               "turbo-prod:bits=2", "polar",
               "qjl",           "rabitq",
               "rabitq:bits=2", "vecinfer",
               "spectral"};
    }
    for (const auto& s : o->kv) kv::parse_method(s);
    limit_simd_target(o->simd);
  });
  return [o]() {
    set_num_threads(o->threads);
    const auto log = [&](const std::string& s) {
      if (!o->json) fmt::print(stderr, "{}\n", s);
    };
    const size_t llc = last_level_cache_bytes();
    const size_t probe = o->bandwidth_mib > 0 ? size_t(o->bandwidth_mib * 1048576.0)
                                              : std::max<size_t>(size_t(1) << 30, 4 * llc);
    log(fmt::format("measuring read bandwidth over {} MiB ({} threads)...", probe >> 20, o->threads));
    const Stats bw = stats_of(measure_read_bandwidth(probe, 5));

    log("generating synthetic keys and values...");
    std::vector<float> k, v;
    synthetic_kv(*o, &k, &v);
    std::vector<kv::LayerConfig> layers(size_t(o->layers));
    // Keys count as rotated by a NEOX RoPE (base 10000), so pre-RoPE codecs pay for turning
    // them back and for rotating while they score, as on a real model.
    kv::RopeSpec rope;
    rope.style = kv::RopeSpec::Style::kNeox;
    for (int l = 0; l < o->layers; ++l) layers[l] = {o->kv_heads, o->head_dim, l, 0, rope};
    std::vector<Bench> benches;
    const size_t row = size_t(o->kv_heads) * o->head_dim;
    for (const auto& spec : o->kv) {
      Bench b;
      kv::Method m = kv::parse_method(spec);
      if (m.needs_calibration()) {
        // Calibrated on the synthetic data itself (its first 4096 tokens, every weight 1), the
        // same calibration for every layer.
        const int64_t n = std::min<int64_t>(o->ctx, 4096);
        m = m.with_calibration(kv::calibrate_on_synthetic(m, layers[0], k.data(), v.data(), n, o->layers, "attn-bench"));
      }
      b.spec = m.spec();
      b.bits = m.bits_per_element(o->head_dim);
      log(fmt::format("filling {} ({} layers x {} tokens)...", b.spec, o->layers, o->ctx));
      b.cache = std::make_unique<kv::KvCache>(m, layers);
      for (int l = 0; l < o->layers; ++l) {
        for (int64_t t = 0; t < o->ctx; t += 4096) {
          const int n = int(std::min<int64_t>(4096, o->ctx - t));
          b.cache->layer(l).append(k.data() + size_t(t) * row, v.data() + size_t(t) * row, n);
        }
      }
      b.mem = b.cache->memory();
      if (b.mem.total() < 2 * llc) {
        log(fmt::format("note: {} holds {} MiB, under twice the {} MiB last-level cache: its timing "
                        "may be served from cache; raise --layers",
                        b.spec, b.mem.total() >> 20, llc >> 20));
      }
      benches.push_back(std::move(b));
    }
    k.clear();
    k.shrink_to_fit();
    v.clear();
    v.shrink_to_fit();

    // One query token per layer at the last position.
    std::vector<float> q(size_t(o->q_heads) * o->head_dim), out(q.size());
    Rng qr(o->seed + 99);
    for (auto& x : q) x = float(qr.normal());
    const int64_t pos = o->ctx - 1;
    const float scale = 1.0f / std::sqrt(float(o->head_dim));
    kv::AttendWorkspace ws;  // kept across calls, as a model session keeps its own
    log("timing...");
    for (int round = 0; round < o->rounds; ++round) {
      for (auto& b : benches) {
        for (int l = 0; l < o->layers; ++l) b.cache->layer(l).attend(q.data(), 1, o->q_heads, &pos, scale, out.data(), ws);
        const auto t0 = std::chrono::steady_clock::now();
        for (int it = 0; it < o->iters; ++it) {
          for (int l = 0; l < o->layers; ++l) {
            b.cache->layer(l).attend(q.data(), 1, o->q_heads, &pos, scale, out.data(), ws);
          }
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        b.us_per_token.push_back(s / o->iters * 1e6);
      }
    }

    const Bench* fp16 = nullptr;
    for (const auto& b : benches) {
      if (b.spec == "fp16") fp16 = &b;
    }
    const Stats base = fp16 ? stats_of(fp16->us_per_token) : Stats{};
    const double noise = fp16 && base.median > 0 ? (base.max - base.min) / base.median : 0;
    nlohmann::json j;
    j["read_bandwidth_gbps"] = bw.median;
    j["read_bandwidth_gbps_min"] = bw.min;
    j["read_bandwidth_gbps_max"] = bw.max;
    j["bandwidth_probe_bytes"] = probe;
    j["last_level_cache_bytes"] = llc;
    j["simd_target"] = simd_target_name();
    j["threads"] = o->threads;
    j["shape"] = {{"q_heads", o->q_heads}, {"kv_heads", o->kv_heads}, {"head_dim", o->head_dim},
                  {"ctx", o->ctx}, {"layers", o->layers}};
    j["rounds"] = o->rounds;
    j["iters"] = o->iters;
    if (fp16) j["fp16_noise_floor"] = noise;
    std::vector<std::vector<std::string>> rows = {
        {"spec", "bits/elem", "KV MiB", "us/token", "min", "max", "GB/s", "% of read BW", "vs fp16"}};
    for (const auto& b : benches) {
      const Stats t = stats_of(b.us_per_token);
      const double bytes = double(b.mem.block_bytes + b.mem.window_bytes + b.mem.sink_bytes);
      const double gbps = bytes / (t.median * 1e-6) / 1e9;
      // Speed-up as the median of per-round ratios: each round times every method back to back,
      // so a ratio within a round cancels the machine's slow drift (other tenants' load) that
      // the medians of separate columns would carry.
      std::vector<double> ratios;
      for (size_t r = 0; fp16 && r < b.us_per_token.size(); ++r) ratios.push_back(fp16->us_per_token[r] / b.us_per_token[r]);
      const Stats ratio = fp16 ? stats_of(ratios) : Stats{};
      const double speedup = ratio.median;
      std::string vs = fp16 ? fmt::format("{:.2f}x [{:.2f}, {:.2f}]", speedup, ratio.min, ratio.max) : "-";
      if (fp16 && &b != fp16 && ratio.min <= 1.0 && ratio.max >= 1.0) vs += " (within noise)";
      j["results"].push_back({{"spec", b.spec},
                              {"bits_per_element", b.bits},
                              {"kv_bytes", b.mem.total()},
                              {"kv_block_bytes", b.mem.block_bytes},
                              {"kv_window_bytes", b.mem.window_bytes},
                              {"us_per_token", t.median},
                              {"us_per_token_min", t.min},
                              {"us_per_token_max", t.max},
                              {"gbps", gbps},
                              {"fraction_of_read_bandwidth", gbps / bw.median},
                              {"speedup_vs_fp16", speedup},
                              {"speedup_vs_fp16_min", ratio.min},
                              {"speedup_vs_fp16_max", ratio.max}});
      rows.push_back({b.spec, fmt::format("{:.3f}", b.bits), fmt::format("{:.1f}", b.mem.total() / 1048576.0),
                      fmt::format("{:.0f}", t.median), fmt::format("{:.0f}", t.min),
                      fmt::format("{:.0f}", t.max), fmt::format("{:.2f}", gbps),
                      fmt::format("{:.0f}%", 100 * gbps / bw.median), vs});
    }
    if (o->json) {
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("read bandwidth {:.2f} GB/s (min {:.2f}, max {:.2f}) over {} MiB; SIMD {}; {} threads\n",
                 bw.median, bw.min, bw.max, probe >> 20, simd_target_name(), o->threads);
      fmt::print("shape: {} q-heads, {} kv-heads, head_dim {}, ctx {}, {} layers; {} rounds x {} steps; "
                 "us/token covers all layers\n",
                 o->q_heads, o->kv_heads, o->head_dim, o->ctx, o->layers, o->rounds, o->iters);
      if (fp16) fmt::print("fp16 noise floor (max-min)/median: {:.1f}%\n", 100 * noise);
      fmt::print("\n");
      print_table(rows);
    }
    return 0;
  };
}

}  // namespace vq::cli
