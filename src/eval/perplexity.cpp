#include "src/eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "src/engine/session.h"
#include "src/eval/logit_kl.h"
#include "veloxquant/error.h"

namespace vq::eval {

int64_t count_chunks(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks) {
  const int64_t n = n_tokens / n_ctx;
  return max_chunks >= 0 ? std::min<int64_t>(n, max_chunks) : n;
}

int32_t chunk_bos(const engine::Tokenizer& tok) { return tok.add_bos() && tok.bos() >= 0 ? tok.bos() : -1; }

std::vector<int32_t> chunk_tokens(const std::vector<int32_t>& tokens, int64_t c, int64_t n_ctx, int32_t bos) {
  VQ_ASSERT(c >= 0 && (c + 1) * n_ctx <= int64_t(tokens.size()));
  std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
  if (bos >= 0) chunk[0] = bos;
  return chunk;
}

std::vector<uint8_t> scored_rows(int64_t n_ctx) {
  std::vector<uint8_t> want(size_t(n_ctx), 0);
  for (int64_t j = first_scored_row(n_ctx); j < n_ctx - 1; ++j) want[size_t(j)] = 1;
  return want;
}

void PerplexityTally::add_chunk(const std::vector<int32_t>& chunk, const float* logits, const float* ref_logits,
                                int64_t n_vocab) {
  const int64_t n_ctx = int64_t(chunk.size()), first = first_scored_row(n_ctx), V = n_vocab;
  std::vector<double> lp, lq;
  for (int64_t j = first; j < n_ctx - 1; ++j) {
    const int64_t k = j - first;
    log_softmax(logits + k * V, V, &lq);
    const double l = -lq[size_t(chunk[size_t(j + 1)])];
    nll += l;
    nll2 += l * l;
    ++count;
    if (ref_logits) {
      log_softmax(ref_logits + k * V, V, &lp);
      ref_nll -= lp[size_t(chunk[size_t(j + 1)])];
      kls.push_back(kl_divergence(lp.data(), lq.data(), V));
      agree += top1_agrees(logits + k * V, ref_logits + k * V, V);
    }
  }
}

double PerplexityTally::ppl() const { return std::exp(nll / double(count)); }

PerplexityScore score(const PerplexityTally& t) {
  PerplexityScore s;
  const double mean = t.nll / double(t.count);
  s.ppl = std::exp(mean);
  const double var = t.nll2 / double(t.count) - mean * mean;
  s.ppl_stderr = var > 0 && t.count > 1 ? s.ppl * std::sqrt(var / double(t.count - 1)) : 0.0;
  s.tokens_scored = t.count;
  s.compared = !t.kls.empty();
  if (s.compared) {
    std::vector<double> sorted = t.kls;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0;
    for (double k : t.kls) sum += k;
    s.kl_mean = sum / double(t.kls.size());
    s.kl_p99 = sorted[std::min(sorted.size() - 1, size_t(0.99 * double(sorted.size())))];
    s.top1_agreement = double(t.agree) / double(t.count);
    s.ppl_fp16 = std::exp(t.ref_nll / double(t.count));
  }
  return s;
}

SeedScores score_seeds(const std::vector<PerplexityScore>& runs) {
  VQ_ASSERT(!runs.empty());
  SeedScores out;
  out.runs = runs;
  const auto field = [&](double PerplexityScore::*f) {
    std::vector<double> v;
    for (const PerplexityScore& r : runs) v.push_back(r.*f);
    return spread_of(v);
  };
  PerplexityScore& m = out.mean;
  m = runs[0];
  out.ppl = field(&PerplexityScore::ppl);
  out.kl_mean = field(&PerplexityScore::kl_mean);
  m.ppl = out.ppl.mean;
  m.kl_mean = out.kl_mean.mean;
  m.ppl_stderr = field(&PerplexityScore::ppl_stderr).mean;
  m.kl_p99 = field(&PerplexityScore::kl_p99).mean;
  m.top1_agreement = field(&PerplexityScore::top1_agreement).mean;
  for (const PerplexityScore& r : runs) {
    VQ_ASSERT(r.tokens_scored == m.tokens_scored && r.compared == m.compared);
  }
  return out;
}

std::vector<PerplexityTally> run_perplexity(
    const engine::Model& model, const std::vector<kv::Method>& methods, const std::vector<int32_t>& tokens,
    const PerplexityRun& run, const std::function<void(int64_t, const std::vector<PerplexityTally>&)>& progress) {
  const int64_t n_ctx = run.n_ctx, V = model.config().n_vocab;
  const int32_t bos = chunk_bos(model.tokenizer());
  bool compare = false;
  for (const auto& m : methods) compare = compare || m.spec() != "fp16";
  std::unique_ptr<engine::Session> ref;
  if (compare) ref = std::make_unique<engine::Session>(model, kv::parse_method("fp16"), n_ctx, run.ubatch, run.kv_budget);
  const std::vector<uint8_t> want = scored_rows(n_ctx);
  std::vector<PerplexityTally> tallies(methods.size());
  std::vector<float> logits, ref_logits;
  for (int64_t c = 0; c < run.n_chunks; ++c) {
    const std::vector<int32_t> chunk = chunk_tokens(tokens, c, n_ctx, bos);
    if (ref) {
      ref->clear();
      ref->feed_select(chunk, want, &ref_logits);
    }
    for (size_t mi = 0; mi < methods.size(); ++mi) {
      const bool cmp = ref && methods[mi].spec() != "fp16";
      {
        engine::Session session(model, methods[mi], n_ctx, run.ubatch, run.kv_budget);
        session.feed_select(chunk, want, &logits);
      }
      tallies[mi].add_chunk(chunk, logits.data(), cmp ? ref_logits.data() : nullptr, V);
    }
    if (progress) progress(c + 1, tallies);
  }
  return tallies;
}

}  // namespace vq::eval
