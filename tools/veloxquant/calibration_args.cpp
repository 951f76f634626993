#include "tools/veloxquant/calibration_args.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "tools/veloxquant/cli_util.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::cli {

void add_calib_option(CLI::App* cmd, std::vector<std::string>* files) {
  cmd->add_option("--calib", *files,
                  "Calibration file (from `veloxquant calibrate`) for a --kv method that needs one; repeatable")
      ->check(CLI::ExistingFile);
}

void add_part_option(CLI::App* cmd, std::string* part) {
  cmd->add_option("--part", *part, "Part of the text file to use: all, first-half or second-half")
      ->check(CLI::IsMember({"all", "first-half", "second-half"}));
}

kv::Method method_for_model(const std::string& spec, const std::vector<std::string>& files,
                            const engine::Model& model) {
  const kv::Method m = kv::parse_method(spec);
  if (!m.needs_calibration()) return m;
  std::vector<std::string> other_specs;
  for (const std::string& f : files) {
    auto c = std::make_shared<kv::Calibration>(kv::load_calibration(f));
    if (c->spec != m.spec()) {
      other_specs.push_back(fmt::format("{} is for '{}'", f, c->spec));
      continue;
    }
    const kv::ModelIdentity id = model.identity();
    VQ_CHECK(c->model == id, fmt::format("{} was made for the model {}, not for {}", f, c->model.describe(), id.describe()));
    return m.with_calibration(std::move(c));
  }
  std::string why = other_specs.empty() ? "none was given" : fmt::format("{}", fmt::join(other_specs, "; "));
  throw_error(ErrorKind::kUsage,
              fmt::format("'{}' needs a calibration made for it ({}): make one with `veloxquant calibrate -m MODEL -f "
                          "TEXT --kv {} -o FILE` and pass --calib FILE",
                          m.spec(), why, m.spec()));
}

std::string read_text_part(const std::string& path, const std::string& part) {
  std::ifstream in(path, std::ios::binary);
  VQ_CHECK(bool(in), fmt::format("{}: cannot open", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (part == "all") return s;
  size_t cut = s.find('\n', s.size() / 2);
  cut = cut == std::string::npos ? s.size() : cut + 1;
  return part == "first-half" ? s.substr(0, cut) : s.substr(cut);
}

void print_calibration(const kv::Calibration& c) {
  fmt::print("spec: {}\nmodel: {}\nsource: {} ({} tokens)\n", c.spec, c.model.describe(), c.source, c.tokens);
  if (!c.probe_bits.empty()) {
    // RateQuant: the allocation and the probe it came from, a row per layer or per KV head.
    const bool per_head = !c.layers.empty() && !c.layers[0].key_head_bits.empty();
    std::vector<std::string> head = {"layer"};
    if (per_head) head.push_back("KV head");
    head.insert(head.end(), {"key bits", "value bits"});
    for (int b : c.probe_bits) head.push_back(fmt::format("key KL@{}", b));
    for (int b : c.probe_bits) head.push_back(fmt::format("value KL@{}", b));
    std::vector<std::vector<std::string>> rows = {head};
    int64_t sum = 0, units = 0;
    const size_t W = c.probe_bits.size();
    for (size_t l = 0; l < c.layers.size(); ++l) {
      const kv::LayerCalibration& lc = c.layers[l];
      const size_t H = per_head ? lc.key_head_bits.size() : 1;
      for (size_t h = 0; h < H; ++h) {
        const int kb = per_head ? lc.key_head_bits[h] : lc.key_bits, vb = per_head ? lc.value_head_bits[h] : lc.value_bits;
        std::vector<std::string> row = {std::to_string(l)};
        if (per_head) row.push_back(std::to_string(h));
        row.insert(row.end(), {std::to_string(kb), std::to_string(vb)});
        for (size_t i = 0; i < W; ++i) row.push_back(fmt::format("{:.3e}", lc.key_probe_kl[h * W + i]));
        for (size_t i = 0; i < W; ++i) row.push_back(fmt::format("{:.3e}", lc.value_probe_kl[h * W + i]));
        rows.push_back(std::move(row));
        sum += kb + vb;
        units += 2;
      }
    }
    print_table(rows);
    fmt::print("average width {:.4f} bits over {} units (keys and values of {} layers{})\n", double(sum) / double(units),
               units, c.layers.size(), per_head ? fmt::format(", per KV head") : "");
    return;
  }
  const auto levels = [](const std::vector<float>& v) {
    std::string s;
    for (float x : v) s += fmt::format("{}{:+.3f}", s.empty() ? "" : " ", x);
    return s;
  };
  if (!c.layers.empty() && c.layers[0].key_rank > 0) {
    // SpectralQuant: each side's signal rank, and the share of the variance its r strongest
    // directions hold (mean over the KV heads).
    const auto share = [](const std::vector<kv::SpectralBasis>& heads, int r) {
      double s = 0;
      for (const kv::SpectralBasis& b : heads) {
        double top = 0, all = 0;
        for (size_t i = 0; i < b.sigma.size(); ++i) {
          const double l = double(b.sigma[i]) * b.sigma[i];
          all += l;
          if (int(i) < r) top += l;
        }
        s += all > 0 ? top / all : 0.0;
      }
      return heads.empty() ? 0.0 : s / double(heads.size());
    };
    std::vector<std::vector<std::string>> rows = {
        {"layer", "key rank", "key variance in rank", "value rank", "value variance in rank"}};
    for (size_t l = 0; l < c.layers.size(); ++l) {
      const kv::LayerCalibration& lc = c.layers[l];
      rows.push_back({std::to_string(l), std::to_string(lc.key_rank),
                      fmt::format("{:.1f}%", 100 * share(lc.key_spectral, lc.key_rank)), std::to_string(lc.value_rank),
                      fmt::format("{:.1f}%", 100 * share(lc.value_spectral, lc.value_rank))});
    }
    print_table(rows);
    return;
  }
  if (!c.layers.empty() && !c.layers[0].key_commvq.empty()) {
    // CommVQ: codebook shapes per side.
    for (size_t l = 0; l < c.layers.size(); ++l) {
      const kv::LayerCalibration& lc = c.layers[l];
      const size_t stage = size_t(2) * 64 * size_t(lc.head_dim / 2);
      fmt::print("layer {:2}  {} KV heads, key codebook {} stages, value codebook {} stages (4096 codewords each)\n", l,
                 lc.key_commvq.size(), lc.key_commvq.empty() ? 0 : lc.key_commvq[0].size() / stage,
                 lc.value_commvq.empty() ? 0 : lc.value_commvq[0].size() / stage);
    }
    return;
  }
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const kv::LayerCalibration& lc = c.layers[l];
    if (!lc.key_codebook.empty() || !lc.value_codebook.empty()) {
      // Vector quantizers: codebook shapes and the spread of the key smoothing divisors.
      const auto [lo, hi] = lc.key_smooth.empty() ? std::pair<float, float>{1.0f, 1.0f}
                                                  : std::pair<float, float>{
                                                        *std::min_element(lc.key_smooth.begin(), lc.key_smooth.end()),
                                                        *std::max_element(lc.key_smooth.begin(), lc.key_smooth.end())};
      fmt::print("layer {:2}  key codebook {} floats, value codebook {} floats, key smoothing in [{:.3f}, {:.3f}]\n", l,
                 lc.key_codebook.size(), lc.value_codebook.size(), lo, hi);
      continue;
    }
    fmt::print("layer {:2}  key levels [{}]  value levels [{}]\n", l, levels(lc.key_levels), levels(lc.value_levels));
  }
}

}  // namespace vq::cli
