// Median/min/max and a plain aligned table.
#include "tools/veloxquant/cli_util.h"

#include <sys/resource.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include <CLI/CLI.hpp>

#include "src/engine/model.h"
#include "src/engine/session.h"
#include "veloxquant/error.h"

namespace vq::cli {

size_t peak_rss_bytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return size_t(ru.ru_maxrss) * 1024;
}

size_t parse_bytes(const std::string& text, const std::string& flag) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  const std::string digits = text.substr(0, i), suffix = text.substr(i);
  size_t mult = 1;
  if (suffix == "K" || suffix == "k") mult = size_t(1) << 10;
  else if (suffix == "M" || suffix == "m") mult = size_t(1) << 20;
  else if (suffix == "G" || suffix == "g") mult = size_t(1) << 30;
  else if (!suffix.empty()) mult = 0;
  VQ_CHECK(!digits.empty() && digits.size() <= 12 && mult != 0,
           fmt::format("{} {}: expected a byte count such as 4096, 512M or 2G", flag, text));
  return size_t(std::stoull(digits)) * mult;
}

size_t kv_budget_bytes(const std::string& option) {
  return option.empty() ? engine::default_kv_budget() : parse_bytes(option, "--kv-budget");
}

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

void add_model_options(CLI::App* cmd, std::string* model, bool* mmap) {
  cmd->add_option("-m,--model", *model, "GGUF model file")->required();
  cmd->add_flag("--mmap", *mmap,
                "Map the model file instead of reading it into memory: starts sooner and shares the page cache, "
                "decodes slower (llama.cpp's --mmap)");
}

std::unique_ptr<engine::Model> load_model(const std::string& path, bool mmap) {
  return engine::Model::load(path, mmap ? engine::GgufLoad::kMap : engine::GgufLoad::kRead);
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    std::string line;
    for (size_t i = 0; i < rows[k].size(); ++i) {
      if (i == 0) {
        line += fmt::format("{:<{}}", rows[k][i], width[i]);
      } else {
        line += fmt::format("  {:>{}}", rows[k][i], width[i]);
      }
    }
    fmt::print("{}\n", line);
    if (k == 0) {
      size_t total = 0;
      for (size_t i = 0; i < width.size(); ++i) total += width[i] + (i ? 2 : 0);
      fmt::print("{}\n", std::string(total, '-'));
    }
  }
}

// --chat-template NAME, else the model file's template. Refuses (one line) a file whose
// template is none of llama.cpp's, or one not formatted here.
engine::ChatTemplate chat_template_for(const engine::Model& model, const std::string& name) {
  if (!name.empty()) return engine::chat_template_from_name(name);
  const engine::ChatTemplate t = engine::model_chat_template(model.file());
  VQ_CHECK(t != engine::ChatTemplate::kUnknown,
           fmt::format("{}: tokenizer.chat_template is none of the known chat templates; pass --chat-template NAME "
                       "(one of: {})",
                       model.file().path(), engine::chat_template_names()));
  VQ_CHECK(engine::chat_template_formats(t),
           fmt::format("{}: tokenizer.chat_template is llama.cpp's '{}', which is not supported here; pass "
                       "--chat-template NAME (one of: {})",
                       model.file().path(), engine::chat_template_name(t), engine::chat_template_names()));
  return t;
}

}  // namespace vq::cli
