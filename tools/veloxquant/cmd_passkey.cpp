// `veloxquant passkey`: passkey retrieval (src/eval/passkey.h) at several prompt lengths; reports
// retrieval accuracy per length and per depth band, for any KV method.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "src/core/threads.h"
#include "src/eval/passkey.h"
#include "tools/veloxquant/calibration_args.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"
#include "veloxquant/error.h"

namespace vq::cli {

Runner add_passkey_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("passkey", "Passkey retrieval accuracy at several context lengths");
  struct Opts {
    std::string model, kv = "fp16";
    bool mmap = false;
    std::string kv_budget;
    std::vector<std::string> calib;
    std::vector<int64_t> ctx = {1024, 4096};
    int trials = 5, threads = 2, bands = 3;
    uint64_t seed = 1;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  add_model_options(cmd, &o->model, &o->mmap);
  cmd->add_option("--kv", o->kv, "KV-cache method spec");
  cmd->add_option("--kv-budget", o->kv_budget, "Largest KV cache allowed, e.g. 2G (0: no limit; default: 80% of available memory)");
  cmd->add_option("--ctx", o->ctx, "Prompt lengths in tokens (comma separated)")->delimiter(',');
  cmd->add_option("--trials", o->trials, "Trials per length")->check(CLI::Range(1, 100000));
  cmd->add_option("--bands", o->bands, "Depth bands to report")->check(CLI::Range(1, 100));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("--seed", o->seed, "Seed for keys and depths");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  add_calib_option(cmd, &o->calib);
  cmd->callback([o]() {
    kv::parse_method(o->kv);
    for (int64_t c : o->ctx) VQ_CHECK(c >= 64, fmt::format("--ctx {} is below 64 tokens", c));
  });
  return [o]() {
    set_num_threads(o->threads);
    const auto model = load_model(o->model, o->mmap);
    const kv::Method method = method_for_model(o->kv, o->calib, *model);
    eval::PasskeyRun run;
    run.ctx = o->ctx;
    run.trials = o->trials;
    run.bands = o->bands;
    run.seed = o->seed;
    run.kv_budget = kv_budget_bytes(o->kv_budget);
    const auto on_trial = [&](const eval::PasskeyTrial& t) {
      if (o->json) return;
      fmt::print(stderr, "ctx {} trial {}/{}: depth {:.2f} key {} answer '{}' {}\n", t.ctx, t.index + 1, o->trials, t.depth,
                 t.key, t.answer, t.hit ? "ok" : "miss");
    };
    const std::vector<eval::PasskeyLength> lengths = eval::run_passkey(*model, method, run, on_trial);
    nlohmann::json j;
    j["kv"] = method.spec();
    j["model"] = o->model;
    std::vector<std::vector<std::string>> rows = {{"ctx", "accuracy", "trials"}};
    for (int b = 0; b < o->bands; ++b) rows[0].push_back(fmt::format("depth {}-{}%", 100 * b / o->bands, 100 * (b + 1) / o->bands));
    for (const eval::PasskeyLength& len : lengths) {
      const double accuracy = double(len.ok) / len.trials;
      nlohmann::json r = {{"ctx", len.ctx}, {"accuracy", accuracy}, {"trials", len.trials}};
      std::vector<std::string> row = {std::to_string(len.ctx), fmt::format("{:.2f}", accuracy), std::to_string(len.trials)};
      for (int b = 0; b < o->bands; ++b) {
        const int count = len.counts[size_t(b)];
        const double acc = count ? double(len.hits[size_t(b)]) / count : 0.0;
        r["depth_bands"].push_back({{"from", double(b) / o->bands}, {"to", double(b + 1) / o->bands},
                                    {"trials", count}, {"accuracy", acc}});
        row.push_back(count ? fmt::format("{:.2f} ({})", acc, count) : "-");
      }
      j["results"].push_back(r);
      rows.push_back(row);
    }
    if (o->json) {
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("passkey retrieval, kv {}\n\n", method.spec());
      print_table(rows);
    }
    return 0;
  };
}

}  // namespace vq::cli
