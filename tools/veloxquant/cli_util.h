// Small helpers shared by the subcommands: timing statistics and table output.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/engine/chat_template.h"

namespace CLI {
class App;
}  // namespace CLI
namespace vq::engine {
class Model;
}  // namespace vq::engine

namespace vq::cli {

struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats stats_of(std::vector<double> v);

// A byte count with an optional K, M or G suffix (powers of 1024), e.g. "512M"; throws a usage
// error naming `flag` otherwise.
size_t parse_bytes(const std::string& text, const std::string& flag);
// The process's peak resident memory so far (getrusage).
size_t peak_rss_bytes();

// The --kv-budget in bytes: the given size, 0 for no limit, or by default 80% of the available
// memory.
size_t kv_budget_bytes(const std::string& option);

// --chat-template NAME, else the model file's template. Refuses (one line) a file whose template
// is none of llama.cpp's, or one not formatted here.
engine::ChatTemplate chat_template_for(const engine::Model& model, const std::string& name);

// -m/--model (required) and --mmap, for the commands that load a model: the weights are read into
// memory unless --mmap asks for the file to be mapped (engine::GgufLoad).
void add_model_options(CLI::App* cmd, std::string* model, bool* mmap);
// The model those options name, loaded as they ask.
std::unique_ptr<engine::Model> load_model(const std::string& path, bool mmap);

// Prints rows as an aligned text table; the first row is the header.
void print_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace vq::cli
