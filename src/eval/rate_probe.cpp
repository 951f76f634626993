#include "src/eval/rate_probe.h"

#include <fmt/format.h>

#include "src/engine/session.h"
#include "src/eval/logit_kl.h"
#include "src/eval/perplexity.h"
#include "src/kv/methods/ratequant/ratequant.h"
#include "veloxquant/error.h"

namespace vq::eval {

kv::RateProbe run_rate_probe(const engine::Model& model, const kv::Method& method,
                             const std::vector<std::vector<int32_t>>& chunks,
                             const std::vector<std::shared_ptr<const kv::Calibration>>& base_calibs,
                             const std::function<void(int64_t, int64_t)>& progress) {
  VQ_CHECK(!chunks.empty(), "ratequant probe: no calibration chunks");
  const std::vector<int> widths = kv::ratequant_widths(method);
  const int L = int(model.cache_layout().size()), W = int(widths.size());
  // With unit=head, each KV head of each layer is a unit of its own (head -1: the whole layer).
  const bool per_head = kv::ratequant_per_head(method);
  const int H = kv::ratequant_unit_heads(method, model.cache_layout()[0].n_kv_heads);
  for (const kv::LayerConfig& c : model.cache_layout()) {
    VQ_CHECK(!per_head || c.n_kv_heads == H, "ratequant probe: unit=head needs the same KV heads in every layer");
  }
  const int64_t n_ctx = int64_t(chunks[0].size()), V = model.config().n_vocab;
  const std::vector<uint8_t> want = scored_rows(n_ctx);
  const int64_t rows = n_ctx - 1 - first_scored_row(n_ctx);
  VQ_CHECK(rows > 0, fmt::format("ratequant probe: chunks of {} tokens score nothing", n_ctx));
  kv::RateProbe probe(static_cast<size_t>(L));
  for (auto& p : probe) p = {std::vector<double>(size_t(H * W), 0.0), std::vector<double>(size_t(H * W), 0.0)};
  const int64_t runs = int64_t(chunks.size()) * L * 2 * H * W;
  int64_t done = 0;
  std::vector<float> logits;
  for (const std::vector<int32_t>& chunk : chunks) {
    {
      engine::Session ref(model, kv::ratequant_probe_reference(method, L), n_ctx);
      ref.feed_select(chunk, want, &logits);
    }
    const ReferenceDistributions p(logits, rows, V);
    for (int l = 0; l < L; ++l) {
      for (int side = 0; side < 2; ++side) {
        for (int h = 0; h < H; ++h) {
          for (int i = 0; i < W; ++i) {
            {
              engine::Session s(model,
                                kv::ratequant_probe_method(method, L, l, side, widths[size_t(i)],
                                                           base_calibs.empty() ? nullptr : base_calibs[size_t(i)],
                                                           per_head ? h : -1),
                                n_ctx);
              s.feed_select(chunk, want, &logits);
            }
            probe[size_t(l)][size_t(side)][size_t(h * W + i)] += p.mean_kl(logits) / double(chunks.size());
            ++done;
            if (progress) progress(done, runs);
          }
        }
      }
    }
  }
  return probe;
}

}  // namespace vq::eval
