// Every architecture the engine runs, against llama.cpp: a random-weight model of the family's
// real head shape with a real vocabulary (tests/engine/synthetic_model.h) is run on a fixed token
// sequence with an fp16 cache, and its logits are held to llama.cpp's on the same file
// (tests/golden/arch/<name>.json, commands in tests/golden/arch/COMMANDS.md): every logit the
// golden file keeps (each position's top 16 and 48 fixed ids) within llama.cpp's own difference
// between flash attention on and off, and the same top-1 wherever llama.cpp's top-1/top-2 margin
// exceeds 0.1. Then one compressed cache runs on the same model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "src/engine/model.h"
#include "src/engine/session.h"
#include "tests/engine/synthetic_model.h"
#include "veloxquant/kv/method.h"

namespace vq::engine {
namespace {

std::string src(const std::string& rel) { return std::string(VQ_SOURCE_DIR) + "/" + rel; }

class Architecture : public ::testing::TestWithParam<std::string> {
 protected:
  // Each model is written once per process (they are up to 100 MB) and removed at the end.
  static std::string model_path(const std::string& name) {
    static std::map<std::string, std::string> written;
    auto it = written.find(name);
    if (it != written.end()) return it->second;
    const auto& spec = testing::synthetic_spec(name);
    // The process id in the name: ctest runs each test of this file as its own process, at once.
    const std::string path =
        ::testing::TempDir() + "/synthetic_" + spec.name + "_" + std::to_string(getpid()) + ".gguf";
    testing::write_synthetic_model(spec, src("tests/data/vocab/" + spec.vocab), path);
    paths().push_back(path);
    return written[name] = path;
  }
  static std::vector<std::string>& paths() {
    static std::vector<std::string> p;
    return p;
  }
  static void TearDownTestSuite() {
    for (const auto& p : paths()) std::remove(p.c_str());
  }
  void SetUp() override {
    path_ = model_path(GetParam());
    std::ifstream f(src("tests/golden/arch/" + GetParam() + ".json"));
    ASSERT_TRUE(f) << "golden file for " << GetParam();
    golden_ = nlohmann::json::parse(f);
  }
  std::string path_;
  nlohmann::json golden_;
};

TEST_P(Architecture, LogitsMatchLlamaCpp) {
  const auto model = Model::load(path_);
  ASSERT_EQ(model->config().arch, golden_["arch"].get<std::string>());
  ASSERT_EQ(model->file().content_crc32(), golden_["file_crc32"].get<uint32_t>())
      << "the synthetic model's bytes changed: remake the golden file (tests/golden/arch/COMMANDS.md)";
  const std::vector<int32_t> tokens = golden_["tokens"].get<std::vector<int32_t>>();
  const int64_t V = model->config().n_vocab;
  ASSERT_EQ(V, golden_["n_vocab"].get<int64_t>());
  Session s(*model, kv::parse_method("fp16"), int64_t(tokens.size()) + 16, 7);  // several micro-batches
  std::vector<float> last, all;
  s.feed(tokens, &last, &all);
  const double bound = golden_["fa_on_vs_off_max_abs"].get<double>();
  double worst = 0.0;
  int checked_top1 = 0;
  const auto& positions = golden_["positions"];
  ASSERT_EQ(positions.size(), tokens.size());
  for (size_t p = 0; p < tokens.size(); ++p) {
    const auto& g = positions[p];
    const float* row = all.data() + p * size_t(V);
    const auto ids = g["ids"].get<std::vector<int32_t>>();
    const auto ref = g["fa_on"].get<std::vector<double>>();
    for (size_t i = 0; i < ids.size(); ++i) worst = std::max(worst, std::abs(double(row[ids[i]]) - ref[i]));
    if (g["margin"].get<double>() > 0.1) {
      const int32_t top = int32_t(std::max_element(row, row + V) - row);
      EXPECT_EQ(top, g["top1"].get<int32_t>()) << "position " << p;
      ++checked_top1;
    }
  }
  std::printf("%s: max |ours - llama.cpp| %.3g over the kept logits; llama.cpp FA on vs off %.3g; top-1 checked at "
              "%d of %zu positions\n", GetParam().c_str(), worst, bound, checked_top1, tokens.size());
  EXPECT_LE(worst, bound);
  EXPECT_GT(checked_top1, int(tokens.size()) / 2);
}

TEST_P(Architecture, CompressedCacheRuns) {
  const auto model = Model::load(path_);
  const std::vector<int32_t> tokens = golden_["tokens"].get<std::vector<int32_t>>();
  const int64_t V = model->config().n_vocab;
  Session ref(*model, kv::parse_method("fp16"), 64);
  Session q(*model, kv::parse_method("kivi:kbits=4,vbits=4,residual=0,group=32"), 64);
  std::vector<float> a, b;
  ref.feed(tokens, &a);
  q.feed(tokens, &b);
  for (int step = 0; step < 4; ++step) {
    const int32_t next = int32_t(std::max_element(a.begin(), a.end()) - a.begin());
    ref.feed({next}, &a);
    q.feed({next}, &b);
  }
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; i < V; ++i) {
    diff = std::max(diff, double(std::abs(a[size_t(i)] - b[size_t(i)])));
    scale = std::max(scale, double(std::abs(a[size_t(i)])));
  }
  EXPECT_GT(diff, 0.0) << "a 4-bit cache should not equal fp16 to the bit";
  EXPECT_LT(diff, 0.5 * scale) << "4-bit KIVI moved the logits too far";
}

// Three sequences in one pass (Model::forward_batch, as the server runs them) give each the same
// logits, to the bit, as running each alone: prefills of different lengths together, then decode
// steps of all three together, with a compressed cache.
TEST_P(Architecture, BatchedSequencesMatchEachAlone) {
  const auto model = Model::load(path_);
  const std::vector<int32_t> all = golden_["tokens"].get<std::vector<int32_t>>();
  const int64_t V = model->config().n_vocab;
  const kv::Method method = kv::parse_method("q4");
  const std::vector<size_t> lengths = {all.size(), all.size() / 2, 3};
  std::vector<std::vector<float>> alone;  // per sequence: prefill's last logits, then each step's
  for (size_t len : lengths) {
    kv::KvCache cache(method, model->cache_layout());
    Activations act;
    std::vector<uint8_t> want(len, 0);
    want.back() = 1;
    std::vector<float> out(static_cast<size_t>(V)), trace;
    model->forward(all.data(), int(len), 0, cache, want.data(), out.data(), act);
    trace = out;
    for (int step = 0; step < 3; ++step) {
      const int32_t t = all[size_t(step)];
      const uint8_t w = 1;
      model->forward(&t, 1, int64_t(len) + step, cache, &w, out.data(), act);
      trace.insert(trace.end(), out.begin(), out.end());
    }
    alone.push_back(trace);
  }
  std::vector<std::unique_ptr<kv::KvCache>> caches;
  for (size_t i = 0; i < lengths.size(); ++i) caches.push_back(std::make_unique<kv::KvCache>(method, model->cache_layout()));
  Activations act;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> want;
  CacheBatch batch;
  for (size_t i = 0; i < lengths.size(); ++i) {
    batch.push_back({caches[i].get(), int(tokens.size()), int(lengths[i]), 0});
    tokens.insert(tokens.end(), all.begin(), all.begin() + int64_t(lengths[i]));
    want.resize(tokens.size(), 0);
    want.back() = 1;
  }
  std::vector<float> out(lengths.size() * size_t(V));
  std::vector<std::vector<float>> together(lengths.size());
  model->forward_batch(tokens.data(), batch, want.data(), out.data(), act);
  for (size_t i = 0; i < lengths.size(); ++i) together[i].assign(out.begin() + int64_t(i) * V, out.begin() + int64_t(i + 1) * V);
  for (int step = 0; step < 3; ++step) {
    tokens.assign(lengths.size(), all[size_t(step)]);
    want.assign(lengths.size(), 1);
    batch.clear();
    for (size_t i = 0; i < lengths.size(); ++i) batch.push_back({caches[i].get(), int(i), 1, int64_t(lengths[i]) + step});
    model->forward_batch(tokens.data(), batch, want.data(), out.data(), act);
    for (size_t i = 0; i < lengths.size(); ++i) {
      together[i].insert(together[i].end(), out.begin() + int64_t(i) * V, out.begin() + int64_t(i + 1) * V);
    }
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    ASSERT_EQ(together[i].size(), alone[i].size());
    EXPECT_EQ(std::memcmp(together[i].data(), alone[i].data(), alone[i].size() * sizeof(float)), 0)
        << "sequence " << i << " of length " << lengths[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Engine, Architecture,
                         ::testing::Values("llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma2"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace vq::engine
