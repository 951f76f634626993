// Model loading: architecture dispatch and checked access to weight tensors.
#include "src/engine/model.h"

#include <fmt/format.h>

#include <cmath>

#include "src/engine/ops.h"
#include "src/engine/quants.h"
#include "veloxquant/error.h"

namespace vq::engine {

std::unique_ptr<Model> Model::load(const std::string& path) { return load(GgufFile::open(path)); }

std::unique_ptr<Model> Model::load(std::unique_ptr<GgufFile> f) {
  const std::string& path = f->path();
  const std::string arch = f->get_string("general.architecture");
  if (arch == "gemma3") return make_gemma3(std::move(f));
  if (arch == "llama" || arch == "qwen2") return make_llama(std::move(f));
  throw_error(ErrorKind::kData,
              fmt::format("{}: architecture '{}' is not supported (gemma3, llama and qwen2 are)", path, arch));
}

std::vector<kv::LayerConfig> Model::cache_layout() const {
  std::vector<kv::LayerConfig> out;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const bool swa = cfg_.swa_layer[size_t(l)];
    kv::RopeSpec rope;
    rope.style = cfg_.rope_neox ? kv::RopeSpec::Style::kNeox : kv::RopeSpec::Style::kNorm;
    rope.base = swa ? cfg_.rope_base_swa : cfg_.rope_base;
    rope.freq_scale = swa ? 1.0f : cfg_.rope_scale;
    out.push_back({cfg_.n_head_kv, cfg_.head_dim, l, swa ? cfg_.sliding_window : 0, rope});
  }
  return out;
}

kv::ModelIdentity Model::identity() const {
  kv::ModelIdentity id;
  id.name = file_->get_string("general.name", file_->path().substr(file_->path().find_last_of('/') + 1));
  id.arch = cfg_.arch;
  id.crc32 = file_->content_crc32();
  id.n_layer = cfg_.n_layer;
  id.n_kv_heads = cfg_.n_head_kv;
  id.head_dim = cfg_.head_dim;
  return id;
}

void Model::validate_config() const {
  const ModelConfig& c = cfg_;
  const std::string& p = file_->path();
  VQ_CHECK_DATA(c.n_ctx_train >= 1 && c.n_ctx_train <= (int64_t(1) << 30),
                fmt::format("{}: context_length {} is out of range", p, c.n_ctx_train));
  VQ_CHECK_DATA(std::isfinite(c.rms_eps) && c.rms_eps > 0.0f && c.rms_eps < 1.0f,
                fmt::format("{}: layer_norm_rms_epsilon {} is out of range", p, c.rms_eps));
  for (float b : {c.rope_base, c.rope_base_swa, c.rope_scale}) {
    VQ_CHECK_DATA(std::isfinite(b) && b > 0.0f, fmt::format("{}: RoPE base or scale {} is not a positive number", p, b));
  }
  VQ_CHECK_DATA(c.sliding_window >= 0 && c.sliding_window <= (1 << 30),
                fmt::format("{}: sliding_window {} is out of range", p, c.sliding_window));
}

Weight Model::weight(const std::string& name, int64_t rows, int64_t cols) const {
  const GgufTensor& t = file_->tensor(name);
  const bool shape_ok = t.shape.size() == 2 && int64_t(t.shape[0]) == cols && int64_t(t.shape[1]) == rows;
  VQ_CHECK_DATA(shape_ok, fmt::format("{}: tensor '{}' has the wrong shape (want {} x {})", file_->path(), name, cols, rows));
  VQ_CHECK_DATA(is_supported_weight_type(t.type),
                fmt::format("{}: tensor '{}' has unsupported type {}", file_->path(), name, ggml_type_info(t.type)->name));
  return Weight{t.type, rows, cols, t.data, row_bytes(t.type, cols)};
}

const float* Model::vector(const std::string& name, int64_t n) const {
  const GgufTensor& t = file_->tensor(name);
  VQ_CHECK_DATA(t.type == uint32_t(GgmlType::kF32) && int64_t(t.n_elements) == n,
                fmt::format("{}: tensor '{}' must be F32 with {} elements", file_->path(), name, n));
  VQ_CHECK_DATA(reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0,
                fmt::format("{}: tensor '{}' is misaligned", file_->path(), name));
  const float* v = reinterpret_cast<const float*>(t.data);
  for (int64_t i = 0; i < n; ++i) {
    VQ_CHECK_DATA(std::isfinite(v[i]), fmt::format("{}: tensor '{}' holds a non-finite value at {}", file_->path(), name, i));
  }
  return v;
}

void Model::output_logits(const std::vector<float>& x, int n, const uint8_t* want, const float* norm,
                          const Weight& out, float* logits) const {
  if (!want || !logits) return;
  const int64_t E = cfg_.n_embd;
  std::vector<float> rows;
  for (int i = 0; i < n; ++i) {
    if (want[i]) rows.insert(rows.end(), x.begin() + i * E, x.begin() + (i + 1) * E);
  }
  const int64_t n_out = int64_t(rows.size()) / E;
  rms_norm(rows.data(), norm, n_out, E, cfg_.rms_eps, rows.data());
  matmul(out, rows.data(), n_out, logits);
}

}  // namespace vq::engine
