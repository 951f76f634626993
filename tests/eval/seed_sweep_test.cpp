// Seed sweeps: which specs expand (those whose method draws from a `seed` parameter, the
// baselines only with rot=1), the seeds and specs of each run, an explicit seed honoured, the
// refusals, and the means and spreads that perplexity and fidelity report over seeds.
#include "src/eval/seed_sweep.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/eval/fidelity.h"
#include "src/eval/perplexity.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/method.h"

namespace vq::eval {
namespace {

// The registry's default seed of a method.
int64_t default_seed(const std::string& method) {
  for (const kv::MethodDef* d : kv::registered_methods()) {
    if (d->info.name != method) continue;
    for (const kv::ParamInfo& p : d->info.params) {
      if (p.name == "seed") return int64_t(p.default_value);
    }
  }
  ADD_FAILURE() << method << " has no seed";
  return -1;
}

std::vector<std::string> specs_of(const std::vector<SeedVariant>& v) {
  std::vector<std::string> out;
  for (const SeedVariant& x : v) out.push_back(x.spec);
  return out;
}

std::vector<int64_t> seeds_of(const std::vector<SeedVariant>& v) {
  std::vector<int64_t> out;
  for (const SeedVariant& x : v) out.push_back(x.seed);
  return out;
}

TEST(SeedSweep, SpecsThatDrawNothingRunOnce) {
  for (const std::string spec : {"fp16", "q8", "q4", "q4:rot=0", "kivi", "kivi:kbits=4,vbits=4", "kvquant:bits=3",
                                 "ratequant", "k=q8,v=kivi"}) {
    const std::vector<SeedVariant> v = seed_variants(spec, 4);
    ASSERT_EQ(v.size(), 1u) << spec;
    EXPECT_EQ(v[0].spec, kv::canonical_spec(spec));
    EXPECT_EQ(v[0].seed, -1) << spec;
  }
}

TEST(SeedSweep, DefaultSeedAndTheNext) {
  const int64_t s = default_seed("turbo");
  const std::vector<SeedVariant> v = seed_variants("turbo:bits=2", 3);
  EXPECT_EQ(seeds_of(v), (std::vector<int64_t>{s, s + 1, s + 2}));
  EXPECT_EQ(specs_of(v), (std::vector<std::string>{"turbo:bits=2", fmt::format("turbo:bits=2,seed={}", s + 1),
                                                   fmt::format("turbo:bits=2,seed={}", s + 2)}));
  // One seed: the spec itself.
  const std::vector<SeedVariant> one = seed_variants("turbo:bits=2", 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].spec, "turbo:bits=2");
  EXPECT_EQ(one[0].seed, s);
}

TEST(SeedSweep, ExplicitSeedHonoured) {
  const std::vector<SeedVariant> v = seed_variants("qjl:seed=7,m=128", 2);
  EXPECT_EQ(seeds_of(v), (std::vector<int64_t>{7, 8}));
  // Canonical order: the parameters as the method declares them.
  EXPECT_EQ(specs_of(v), (std::vector<std::string>{kv::canonical_spec("qjl:m=128,seed=7"),
                                                   kv::canonical_spec("qjl:m=128,seed=8")}));
  EXPECT_EQ(kv::parse_method(v[1].spec).spec(), v[1].spec);
}

TEST(SeedSweep, BaselinesDrawOnlyWhenRotated) {
  const std::vector<SeedVariant> v = seed_variants("q4:rot=1,seed=5", 2);
  EXPECT_EQ(specs_of(v), (std::vector<std::string>{"q4:rot=1,seed=5", "q4:rot=1,seed=6"}));
  EXPECT_EQ(seed_variants("q4:rot=true", 2).size(), 2u);
  EXPECT_EQ(seed_variants("q4:seed=5", 2).size(), 1u);  // the seed is unused without the rotation
}

TEST(SeedSweep, EachSideOfKeysAndValues) {
  const int64_t s = default_seed("qjl");
  // Both sides draw: each steps from its own seed; the reported seed is the key side's.
  const std::vector<SeedVariant> both = seed_variants("k=qjl,v=turbo:seed=40", 2);
  EXPECT_EQ(seeds_of(both), (std::vector<int64_t>{s, s + 1}));
  EXPECT_EQ(both[1].spec, fmt::format("k=qjl:seed={},v=turbo:seed=41", s + 1));
  // Only the value side draws.
  const std::vector<SeedVariant> v = seed_variants("k=q8,v=rabitq:seed=3", 2);
  EXPECT_EQ(seeds_of(v), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(v[1].spec, "k=q8,v=rabitq:seed=4");
}

TEST(SeedSweep, EveryMethodWithASeedExpands) {
  int drawing = 0;
  for (const kv::MethodDef* d : kv::registered_methods()) {
    bool seed = false, rot = false;
    for (const kv::ParamInfo& p : d->info.params) {
      seed = seed || p.name == "seed";
      rot = rot || p.name == "rot";
    }
    const std::string spec = d->info.name + (rot ? ":rot=1" : "");
    const std::vector<SeedVariant> v = seed_variants(spec, 2);
    ASSERT_EQ(v.size(), seed ? 2u : 1u) << spec;
    if (!seed) continue;
    ++drawing;
    EXPECT_NE(v[0].spec, v[1].spec);
    EXPECT_EQ(v[1].seed, v[0].seed + 1);
    EXPECT_EQ(kv::parse_method(v[1].spec).spec(), v[1].spec);
  }
  EXPECT_GE(drawing, 8);  // turbo, turbo-rvq, turbo-prod, polar, qjl, rabitq, vecinfer, commvq, the baselines
}

void expect_usage_error(const std::string& spec, int n, const std::string& fragment) {
  try {
    seed_variants(spec, n);
    FAIL() << spec << " with " << n << " seeds was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(SeedSweep, Refusals) {
  expect_usage_error("turbo", 0, "--seeds 0");
  expect_usage_error("turbo", -3, "--seeds -3");
  expect_usage_error("fp16", kMaxSeeds + 1, "outside");
  expect_usage_error("turbo:seed=2147483647", 2, "2147483648");
  expect_usage_error("nosuch", 2, "nosuch");
  EXPECT_EQ(seed_variants("turbo:seed=2147483646", 2).size(), 2u);
}

TEST(SeedSweep, Spread) {
  const Spread s = spread_of({3, 1, 2, 6});
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 6);
  EXPECT_EQ(s.mean, 3);
}

TEST(SeedSweep, PerplexityMeansOverSeeds) {
  PerplexityScore a, b;
  a.ppl = 10, a.ppl_stderr = 1, a.kl_mean = 0.1, a.kl_p99 = 1, a.top1_agreement = 0.9;
  b.ppl = 14, b.ppl_stderr = 3, b.kl_mean = 0.3, b.kl_p99 = 2, b.top1_agreement = 0.7;
  for (PerplexityScore* x : {&a, &b}) x->compared = true, x->tokens_scored = 63, x->ppl_fp16 = 9;
  const SeedScores s = score_seeds({a, b});
  EXPECT_EQ(s.runs.size(), 2u);
  EXPECT_DOUBLE_EQ(s.mean.ppl, 12);
  EXPECT_DOUBLE_EQ(s.mean.kl_mean, 0.2);
  EXPECT_DOUBLE_EQ(s.mean.ppl_stderr, 2);
  EXPECT_DOUBLE_EQ(s.mean.kl_p99, 1.5);
  EXPECT_DOUBLE_EQ(s.mean.top1_agreement, 0.8);
  EXPECT_EQ(s.mean.tokens_scored, 63);
  EXPECT_EQ(s.mean.ppl_fp16, 9);
  EXPECT_EQ(s.ppl.min, 10);
  EXPECT_EQ(s.ppl.max, 14);
  EXPECT_EQ(s.kl_mean.min, 0.1);
  EXPECT_EQ(s.kl_mean.max, 0.3);
  // One seed: its score unchanged.
  const SeedScores one = score_seeds({b});
  EXPECT_EQ(one.mean.ppl, b.ppl);
  EXPECT_EQ(one.mean.kl_mean, b.kl_mean);
  EXPECT_EQ(one.mean.ppl_stderr, b.ppl_stderr);
}

TEST(SeedSweep, FidelityWorstKeyLayerOverSeeds) {
  const auto layer = [](double key, double out) {
    LayerFidelity f;
    f.key_rel_mse = key;
    f.out_rel_err = out;
    return f;
  };
  // Seed 0's keys are worst at layer 1, seed 1's at layer 0.
  const MethodFidelity r0 = summarize_layers({layer(0.1, 0.5), layer(0.4, 0.2)});
  const MethodFidelity r1 = summarize_layers({layer(0.2, 0.1), layer(0.1, 0.3)});
  EXPECT_EQ(r0.worst_key_layer, 1);
  EXPECT_EQ(r0.worst_key_rel_mse, 0.4);
  EXPECT_EQ(r0.worst_layer, 0);
  EXPECT_EQ(r1.worst_key_layer, 0);
  const SeedFidelity s = summarize_seeds({r0, r1});
  EXPECT_EQ(s.worst_key.min, 0.2);
  EXPECT_EQ(s.worst_key.max, 0.4);
  EXPECT_DOUBLE_EQ(s.worst_key.mean, 0.3);
  ASSERT_EQ(s.mean.layers.size(), 2u);
  EXPECT_DOUBLE_EQ(s.mean.layers[0].key_rel_mse, 0.15);
  EXPECT_DOUBLE_EQ(s.mean.layers[1].out_rel_err, 0.25);
  EXPECT_EQ(s.mean.worst_layer, 0);  // out 0.3 against 0.25
  EXPECT_DOUBLE_EQ(s.mean.mean.key_rel_mse, 0.2);
}

}  // namespace
}  // namespace vq::eval
