// `veloxquant methods`: every registered method, its parameters and defaults, and its bits per
// element at a given head dimension.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"
#include "veloxquant/kv/method.h"

namespace vq::cli {
namespace {

std::string type_name(kv::ParamType t) {
  switch (t) {
    case kv::ParamType::kInt: return "int";
    case kv::ParamType::kFloat: return "float";
    case kv::ParamType::kBool: return "bool";
    case kv::ParamType::kChoice: return "choice";
  }
  return "?";
}

std::string value_text(const kv::ParamInfo& p, double v) {
  if (p.type == kv::ParamType::kChoice) return p.choices.at(size_t(v));
  return p.type == kv::ParamType::kFloat ? fmt::format("{:g}", v) : fmt::format("{}", int64_t(v));
}

}  // namespace

Runner add_methods_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("methods", "List the KV-cache methods, their parameters and bits per element");
  struct Opts {
    bool json = false;
    int head_dim = 128;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->add_option("--head-dim", opts->head_dim, "Head dimension for the bits-per-element figures")
      ->check(CLI::Range(1, 4096));
  return [opts]() {
    nlohmann::json out = nlohmann::json::array();
    std::vector<std::vector<std::string>> rows = {{"method", "bits/elem", "parameters (default)", "summary"}};
    for (const kv::MethodDef* def : kv::registered_methods()) {
      const kv::Method m = kv::parse_method(def->info.name);
      nlohmann::json j;
      j["name"] = def->info.name;
      j["summary"] = def->info.summary;
      j["bits_per_element"] = m.bits_per_element(opts->head_dim);
      j["head_dim"] = opts->head_dim;
      j["needs_calibration"] = m.needs_calibration();
      std::string params;
      for (const auto& p : def->info.params) {
        j["params"].push_back({{"name", p.name},
                               {"type", type_name(p.type)},
                               {"default", p.default_value},
                               {"min", p.min},
                               {"max", p.max},
                               {"help", p.help}});
        params += (params.empty() ? "" : " ") + p.name + "=" + value_text(p, p.default_value);
      }
      out.push_back(j);
      rows.push_back({def->info.name, fmt::format("{:.3f}", m.bits_per_element(opts->head_dim)),
                      params, def->info.summary});
    }
    if (opts->json) {
      fmt::print("{}\n", out.dump(2));
    } else {
      fmt::print("Bits per element at head_dim {} (compressed tokens; fp16 window and sinks apart)\n\n",
                 opts->head_dim);
      print_table(rows);
    }
    return 0;
  };
}

}  // namespace vq::cli
