// veloxquant: the command-line front end. Usage errors exit 2, bad data exits 1, and every
// error is one line on stderr.
#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "tools/veloxquant/commands.h"
#include "veloxquant/error.h"

int main(int argc, char** argv) {
  CLI::App app{"VeloxQuant: compressed KV caches with fused attention, and their measurements",
               "veloxquant"};
  app.require_subcommand(1);
  std::map<CLI::App*, vq::cli::Runner> runners;
  const auto add = [&](vq::cli::Runner r) { runners[app.get_subcommands({}).back()] = std::move(r); };
  add(vq::cli::add_methods_command(app));
  add(vq::cli::add_attn_bench_command(app));
  add(vq::cli::add_inspect_command(app));
  add(vq::cli::add_generate_command(app));
  add(vq::cli::add_perplexity_command(app));
  add(vq::cli::add_chat_command(app));
  add(vq::cli::add_bench_command(app));
  add(vq::cli::add_passkey_command(app));
  add(vq::cli::add_fidelity_command(app));
  add(vq::cli::add_calibrate_command(app));
  add(vq::cli::add_serve_command(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "veloxquant: error: %s\n", e.what());
    return 2;
  } catch (const vq::Error& e) {
    std::fprintf(stderr, "veloxquant: error: %s\n", e.what());
    return e.kind() == vq::ErrorKind::kData ? 1 : 2;
  }
  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
  } catch (const vq::Error& e) {
    std::fprintf(stderr, "veloxquant: error: %s\n", e.what());
    return e.kind() == vq::ErrorKind::kUsage ? 2 : 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "veloxquant: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "veloxquant: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
