// `veloxquant fidelity`: runs the model on a text with an fp16 cache, captures every layer's real
// queries, keys and values, and reports per method and per layer what the method does to them:
// key and value relative MSE and cosine, relative error of the q.k scores, share of attention
// mass that moves, and relative error of the attention output. Real activations show what
// synthetic data hides: outlier channels, attention sinks, per-layer differences. With --seeds N,
// a method that draws a random rotation or sketch is measured with N consecutive seeds
// (src/eval/seed_sweep.h): its figures are the means over seeds, and the spread of the worst
// layer's key error is reported.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/core/threads.h"
#include "src/eval/fidelity.h"
#include "tools/veloxquant/calibration_args.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"
#include "veloxquant/error.h"

namespace vq::cli {

Runner add_fidelity_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("fidelity", "Per-layer error of each method on the model's real Q/K/V");
  struct Opts {
    std::string model, file;
    bool mmap = false;
    std::vector<std::string> kv, calib;
    int64_t tokens = 1024;
    int queries = 32, threads = 2, seeds = 1;
    bool json = false, per_layer = false;
  };
  auto o = std::make_shared<Opts>();
  add_model_options(cmd, &o->model, &o->mmap);
  cmd->add_option("-f,--file", o->file, "Text to run (its first --tokens tokens)")->required();
  cmd->add_option("--kv", o->kv, "Method spec (repeatable); default: q8 q4 q4:rot=1 kivi");
  cmd->add_option("--tokens", o->tokens, "Tokens of the text to run")->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  cmd->add_option("--queries", o->queries, "Last query tokens whose attention is compared")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--seeds", o->seeds,
                  "Seeds per method that draws a random rotation or sketch: the spec's seed and the next N-1; "
                  "figures are means over seeds, with the worst-layer key error's min/mean/max")
      ->check(CLI::Range(1, eval::kMaxSeeds));
  cmd->add_flag("--per-layer", o->per_layer, "Print every layer, not only the mean and the worst");
  cmd->add_flag("--json", o->json, "Print one JSON object (always per layer)");
  add_calib_option(cmd, &o->calib);
  cmd->callback([o]() {
    for (const auto& s : o->kv) eval::seed_variants(s, o->seeds);
  });
  return [o]() {
    set_num_threads(o->threads);
    if (o->kv.empty()) o->kv = {"q8", "q4", "q4:rot=1", "kivi"};
    const auto model = load_model(o->model, o->mmap);
    std::ifstream in(o->file, std::ios::binary);
    VQ_CHECK(bool(in), fmt::format("{}: cannot open", o->file));
    std::stringstream ss;
    ss << in.rdbuf();
    std::vector<int32_t> tokens = model->tokenizer().encode(ss.str());
    VQ_CHECK(int64_t(tokens.size()) >= o->tokens,
             fmt::format("{}: {} tokens, fewer than --tokens {}", o->file, tokens.size(), o->tokens));
    VQ_CHECK(o->tokens <= model->config().n_ctx_train,
             fmt::format("--tokens {} exceeds the model's context length {}", o->tokens, model->config().n_ctx_train));
    tokens.resize(size_t(o->tokens));

    // The fp16 run, captured.
    const std::vector<eval::LayerCapture> caps = eval::capture_layers(*model, tokens);

    nlohmann::json results = nlohmann::json::array();
    std::vector<std::vector<std::string>> table = {
        {"spec", "bits/elem", "key rMSE", "key cos", "val rMSE", "val cos", "score rErr", "mass moved", "out rErr",
         "worst out rErr"}};
    if (o->seeds > 1) table[0].insert(table[0].end(), {"seeds", "worst-layer key rMSE min / mean / max"});
    const auto metrics_json = [](const eval::LayerFidelity& f) {
      return nlohmann::json{{"key_rel_mse", f.key_rel_mse},     {"key_cos", f.key_cos},
                            {"value_rel_mse", f.value_rel_mse}, {"value_cos", f.value_cos},
                            {"score_rel_err", f.score_rel_err}, {"mass_moved", f.mass_moved},
                            {"out_rel_err", f.out_rel_err}};
    };
    for (const auto& spec : o->kv) {
      const std::vector<eval::SeedVariant> variants = eval::seed_variants(spec, o->seeds);
      std::vector<kv::Method> methods;
      std::vector<eval::MethodFidelity> runs;
      for (const eval::SeedVariant& v : variants) {
        methods.push_back(method_for_model(v.spec, o->calib, *model));
        runs.push_back(eval::measure_method(methods.back(), caps, o->queries));
      }
      const kv::Method& method = methods[0];
      const int d = model->config().head_dim;
      const double bits = (method.keys().key_bits(d) + method.values().value_bits(d)) / 2;
      const eval::SeedFidelity seeded = eval::summarize_seeds(runs);
      const eval::MethodFidelity& m = runs.size() > 1 ? seeded.mean : runs[0];
      const eval::LayerFidelity& mean = m.mean;
      const double worst = m.worst_out_rel_err;
      const int worst_layer = m.worst_layer;
      nlohmann::json layers = nlohmann::json::array();
      std::vector<std::vector<std::string>> layer_rows;
      for (size_t l = 0; l < caps.size(); ++l) {
        const eval::LayerFidelity& f = m.layers[l];
        auto j = metrics_json(f);
        j["layer"] = l;
        j["sliding_window"] = caps[l].config.sliding_window;
        layers.push_back(j);
        layer_rows.push_back({fmt::format("  layer {}{}", l, caps[l].config.sliding_window ? " (local)" : ""), "",
                              fmt::format("{:.2e}", f.key_rel_mse), fmt::format("{:.4f}", f.key_cos),
                              fmt::format("{:.2e}", f.value_rel_mse), fmt::format("{:.4f}", f.value_cos),
                              fmt::format("{:.2e}", f.score_rel_err), fmt::format("{:.4f}", f.mass_moved),
                              fmt::format("{:.2e}", f.out_rel_err), ""});
      }
      auto j = nlohmann::json{{"spec", method.spec()}, {"bits_per_element", bits}, {"layers", layers},
                              {"mean", metrics_json(mean)}, {"worst_out_rel_err", worst},
                              {"worst_layer", worst_layer}};
      const eval::Spread& wk = seeded.worst_key;
      if (o->seeds > 1) {
        j["n_seeds"] = runs.size();
        j["worst_key_rel_mse"] = nlohmann::json{{"min", wk.min}, {"mean", wk.mean}, {"max", wk.max}};
      }
      if (runs.size() > 1) {
        nlohmann::json per_seed = nlohmann::json::array();
        for (size_t r = 0; r < runs.size(); ++r) {
          per_seed.push_back(nlohmann::json{{"seed", variants[r].seed},
                                            {"spec", methods[r].spec()},
                                            {"mean", metrics_json(runs[r].mean)},
                                            {"worst_key_rel_mse", runs[r].worst_key_rel_mse},
                                            {"worst_key_layer", runs[r].worst_key_layer},
                                            {"worst_out_rel_err", runs[r].worst_out_rel_err},
                                            {"worst_layer", runs[r].worst_layer}});
        }
        j["seeds"] = per_seed;
      }
      results.push_back(j);
      table.push_back({method.spec(), fmt::format("{:.3f}", bits), fmt::format("{:.2e}", mean.key_rel_mse),
                       fmt::format("{:.4f}", mean.key_cos), fmt::format("{:.2e}", mean.value_rel_mse),
                       fmt::format("{:.4f}", mean.value_cos), fmt::format("{:.2e}", mean.score_rel_err),
                       fmt::format("{:.4f}", mean.mass_moved), fmt::format("{:.2e}", mean.out_rel_err),
                       fmt::format("{:.2e} (layer {})", worst, worst_layer)});
      if (o->seeds > 1) {
        table.back().insert(table.back().end(), {std::to_string(runs.size()),
                                                 fmt::format("{:.2e} / {:.2e} / {:.2e}", wk.min, wk.mean, wk.max)});
        for (auto& row : layer_rows) row.insert(row.end(), {"", ""});
      }
      if (o->per_layer) table.insert(table.end(), layer_rows.begin(), layer_rows.end());
    }
    if (o->json) {
      nlohmann::json j{{"model", o->model}, {"file", o->file}, {"tokens", o->tokens}, {"queries", o->queries},
                       {"results", results}};
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("fidelity on {} tokens of {} (attention of the last {} query tokens), means over {} layers\n\n",
                 o->tokens, o->file, o->queries, caps.size());
      if (o->seeds > 1) {
        fmt::print("rows with several seeds: means over seeds; worst-layer key rMSE: each seed's largest key rMSE "
                   "over layers\n\n");
      }
      print_table(table);
    }
    return 0;
  };
}

}  // namespace vq::cli
