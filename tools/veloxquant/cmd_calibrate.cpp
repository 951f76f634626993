// `veloxquant calibrate`: runs the model with an fp16 cache over chunks of calibration text,
// records each layer's keys (turned back to before RoPE), values, and what errors in them cost
// attention (src/kv/calib/calibrate.h), lets the method learn from them, and writes the result
// as a checked calibration file bound to the spec and to the model. RateQuant learns instead from
// a sensitivity probe (src/eval/rate_probe.h) over --probe-tokens tokens, and its file
// holds the probe table and the bit allocation.
#include <fmt/format.h>

#include <chrono>

#include "src/core/checked_file.h"
#include "src/core/threads.h"
#include "src/engine/session.h"
#include "src/kv/calib/calibrate.h"
#include "src/eval/perplexity.h"
#include "src/eval/rate_probe.h"
#include "src/kv/methods/ratequant/ratequant.h"
#include "tools/veloxquant/calibration_args.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::cli {

Runner add_calibrate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("calibrate", "Learn a method's calibration (e.g. KVQuant's datatypes) from a model on text");
  struct Opts {
    std::string model, file, kv, out, part = "first-half";
    bool mmap = false;
    // 1024 probe tokens: with fewer, a base's fp16 window (KIVI keeps 128) covers much of each probe
    // chunk, and the probe under-weights the compressed part (a 256-token probe lost to uniform
    // widths on Gemma 3 270M, a 1024-token one won: docs/cache.md).
    int64_t ctx = 1024, probe_tokens = 1024;
    int chunks = 8, threads = 2;
  };
  auto o = std::make_shared<Opts>();
  add_model_options(cmd, &o->model, &o->mmap);
  cmd->add_option("-f,--file", o->file, "Calibration text")->required();
  cmd->add_option("--kv", o->kv, "Method spec to calibrate (e.g. kvquant:bits=3)")->required();
  cmd->add_option("-o,--output", o->out, "Calibration file to write")->required();
  add_part_option(cmd, &o->part);
  cmd->add_option("-c,--ctx", o->ctx, "Tokens per chunk")->check(CLI::Range(int64_t(16), int64_t(1) << 20));
  cmd->add_option("--chunks", o->chunks, "Chunks of text to run")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--probe-tokens", o->probe_tokens,
                  "RateQuant: calibration tokens its probe runs per (layer, side, width), in chunks of -c (at most)")
      ->check(CLI::Range(int64_t(16), int64_t(1) << 20));
  cmd->add_option("-t,--threads", o->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->callback([o]() {
    VQ_CHECK(kv::parse_method(o->kv).needs_calibration(),
             fmt::format("'{}' learns nothing from calibration", kv::parse_method(o->kv).spec()));
  });
  return [o]() {
    set_num_threads(o->threads);
    // The output is checked before the model runs: a bad path would otherwise cost the whole run.
    check_checked_file_writable(o->out);
    const kv::Method method = kv::parse_method(o->kv);
    const auto model = load_model(o->model, o->mmap);
    VQ_CHECK(o->ctx <= model->config().n_ctx_train,
             fmt::format("-c {} exceeds the model's context length {}", o->ctx, model->config().n_ctx_train));
    const auto& tok = model->tokenizer();
    const std::vector<int32_t> tokens = tok.encode(read_text_part(o->file, o->part));
    const int64_t n_chunks = std::min<int64_t>(o->chunks, int64_t(tokens.size()) / o->ctx);
    VQ_CHECK(n_chunks > 0, fmt::format("{} ({}): {} tokens, fewer than one chunk of {}", o->file, o->part, tokens.size(), o->ctx));

    // Runs the model with an fp16 cache over the calibration chunks and returns each layer's samples.
    const auto collect = [&]() {
      kv::SampleCollector collector(model->cache_layout());
      engine::Session session(*model, kv::parse_method("fp16"), o->ctx);
      session.set_observer(&collector);
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t c = 0; c < n_chunks; ++c) {
        const std::vector<int32_t> chunk = eval::chunk_tokens(tokens, c, o->ctx, eval::chunk_bos(tok));
        session.clear();
        session.feed_select(chunk, std::vector<uint8_t>(chunk.size(), 0), nullptr);
        fmt::print(stderr, "\r[{}/{}] chunks run ({:.0f} s)   ", c + 1, n_chunks,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      fmt::print(stderr, "\n");
      return collector.take();
    };
    const std::string sample_source = fmt::format("{} ({}), {} chunks of {} tokens", o->file, o->part, n_chunks, o->ctx);

    if (kv::is_ratequant(method)) {
      // Refuse an unreachable budget before the probe runs.
      const int L = int(model->cache_layout().size());
      const int H = model->identity().n_kv_heads;
      kv::ratequant_budget(method, kv::ratequant_units(method, L, H), model->identity().head_dim);
      const int64_t ctx = std::min(o->ctx, o->probe_tokens);
      const int64_t n = std::min<int64_t>(std::max<int64_t>(1, o->probe_tokens / ctx), int64_t(tokens.size()) / ctx);
      VQ_CHECK(n > 0, fmt::format("{} ({}): {} tokens, fewer than one chunk of {}", o->file, o->part, tokens.size(), ctx));
      const std::vector<int> widths = kv::ratequant_widths(method);
      // A base that learns its datatype per width (KVQuant) learns it at every width first, from
      // the same samples, and the probe runs each width with its own.
      std::vector<std::shared_ptr<const kv::Calibration>> base_calibs;
      std::string source;
      if (kv::ratequant_learns_per_width(method)) {
        const std::vector<kv::LayerSamples> samples = collect();
        for (int w : widths) {
          const kv::Method base = kv::ratequant_base_method(method, w);
          fmt::print(stderr, "learning {}...\n", base.spec());
          base_calibs.push_back(
              std::make_shared<const kv::Calibration>(kv::calibrate(base, samples, model->identity(), sample_source)));
        }
        source = fmt::format("datatypes from {}; ", sample_source);
      }
      std::vector<std::vector<int32_t>> chunks;
      for (int64_t c = 0; c < n; ++c) chunks.push_back(eval::chunk_tokens(tokens, c, ctx, eval::chunk_bos(tok)));
      fmt::print(stderr, "probing {}: {} layers x 2 sides{} x {} widths over {} chunk(s) of {} tokens\n", method.spec(),
                 L, kv::ratequant_per_head(method) ? fmt::format(" x {} KV heads", H) : "", widths.size(), n, ctx);
      const auto t0 = std::chrono::steady_clock::now();
      const auto probe = eval::run_rate_probe(*model, method, chunks, base_calibs, [&](int64_t done, int64_t runs) {
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fmt::print(stderr, "\r[{}/{}] probe runs ({:.0f} s, ~{:.0f} s left)   ", done, runs, el,
                   el / double(done) * double(runs - done));
      });
      fmt::print(stderr, "\n");
      source += fmt::format("{} ({}), probe over {} chunk(s) of {} tokens", o->file, o->part, n, ctx);
      const kv::Calibration calib =
          kv::ratequant_calibration(method, model->identity(), source, n * ctx, probe, base_calibs);
      kv::save_calibration(o->out, calib);
      fmt::print("wrote {}: '{}' for {}, from {}\n", o->out, calib.spec, calib.model.describe(), source);
      print_calibration(calib);
      return 0;
    }
    const std::vector<kv::LayerSamples> samples = collect();
    fmt::print(stderr, "learning {}...\n", method.spec());
    const kv::Calibration calib = kv::calibrate(method, samples, model->identity(), sample_source);
    kv::save_calibration(o->out, calib);
    fmt::print("wrote {}: '{}' for {}, from {}\n", o->out, calib.spec, calib.model.describe(), sample_source);
    print_calibration(calib);
    return 0;
  };
}

}  // namespace vq::cli
