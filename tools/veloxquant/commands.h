// The veloxquant subcommands: each registers its options on the app and returns the function
// that runs it once parsing succeeded.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace vq::cli {

using Runner = std::function<int()>;

Runner add_methods_command(CLI::App& app);
Runner add_attn_bench_command(CLI::App& app);
Runner add_inspect_command(CLI::App& app);
Runner add_generate_command(CLI::App& app);
Runner add_perplexity_command(CLI::App& app);
Runner add_chat_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_passkey_command(CLI::App& app);
Runner add_fidelity_command(CLI::App& app);
Runner add_calibrate_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);

}  // namespace vq::cli
