// Perplexity over a token stream, chunked exactly as llama.cpp's llama-perplexity: chunk c is
// tokens [c*n_ctx, (c+1)*n_ctx) with its first token replaced by BOS, each chunk starts from an
// empty cache, and only the second half of each chunk is scored (rows n_ctx/2 .. n_ctx-2, each
// predicting the token after it). With a compressed method, an fp16-cache pass over the same
// tokens gives the KL divergence and top-1 agreement against fp16.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "src/engine/model.h"
#include "src/eval/seed_sweep.h"
#include "veloxquant/kv/method.h"

namespace vq::eval {

// Chunks of n_ctx tokens that fit in n_tokens, at most max_chunks of them (max_chunks < 0: all).
int64_t count_chunks(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks);
// The token that replaces each chunk's first one: the tokenizer's BOS if it adds one, else -1.
int32_t chunk_bos(const engine::Tokenizer& tok);
// Chunk c: tokens [c*n_ctx, (c+1)*n_ctx), its first token replaced by bos unless bos < 0.
std::vector<int32_t> chunk_tokens(const std::vector<int32_t>& tokens, int64_t c, int64_t n_ctx, int32_t bos);
// The first scored row of a chunk of n_ctx tokens.
inline int64_t first_scored_row(int64_t n_ctx) { return n_ctx / 2; }
// The rows a chunk's forward pass must give logits for (Session::feed_select's flags): rows
// first_scored_row(n_ctx) .. n_ctx-2; the last row predicts nothing in the chunk.
std::vector<uint8_t> scored_rows(int64_t n_ctx);

// One method's running sums over the scored rows.
struct PerplexityTally {
  double nll = 0, nll2 = 0, ref_nll = 0;  // sums of -log p(next), its square, the reference's -log p
  int64_t count = 0, agree = 0;           // rows scored; rows whose top-1 token matches the reference
  std::vector<double> kls;                // KL(reference || method) per row, in order (empty: no reference)

  // Scores one chunk: logits (and ref_logits, or nullptr) hold one row of n_vocab floats per
  // scored row of `chunk` (scored_rows order).
  void add_chunk(const std::vector<int32_t>& chunk, const float* logits, const float* ref_logits, int64_t n_vocab);
  // exp(mean negative log-likelihood) so far.
  double ppl() const;
};

struct PerplexityScore {
  double ppl = 0, ppl_stderr = 0;
  int64_t tokens_scored = 0;
  bool compared = false;  // the fields below are set: the tally had a reference
  double kl_mean = 0, kl_p99 = 0, top1_agreement = 0, ppl_fp16 = 0;
};
// The perplexity and its standard error (llama-perplexity's), and the comparison with the
// reference: mean and 99th-percentile KL, top-1 agreement, the reference's perplexity.
PerplexityScore score(const PerplexityTally& t);

// One spec over the seeds of a sweep (seed_variants): each seed's score, their means and the
// spread of the perplexity and the mean KL. Every field of `mean` is the mean over seeds of that
// field (tokens_scored and ppl_fp16 are the same for every seed: the same tokens, one reference).
struct SeedScores {
  std::vector<PerplexityScore> runs;
  PerplexityScore mean;
  Spread ppl, kl_mean;
};
// runs: one score per seed, in seed order (not empty; all compared, or none).
SeedScores score_seeds(const std::vector<PerplexityScore>& runs);

struct PerplexityRun {
  int64_t n_ctx = 512, n_chunks = 0;
  int ubatch = 512;
  size_t kv_budget = 0;  // bytes, 0: no limit
};
// Runs every method over the first run.n_chunks chunks of `tokens`; one fp16 pass per chunk
// serves as the reference of every method other than fp16 (none runs if all are fp16).
// progress(chunks done, tallies) is called after each chunk.
std::vector<PerplexityTally> run_perplexity(
    const engine::Model& model, const std::vector<kv::Method>& methods, const std::vector<int32_t>& tokens,
    const PerplexityRun& run, const std::function<void(int64_t, const std::vector<PerplexityTally>&)>& progress);

}  // namespace vq::eval
