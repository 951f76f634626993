// `veloxquant inspect -m FILE`: what a GGUF file is (architecture, tokenizer, chat template, and
// whether the engine runs it), its metadata and tensor table, and the tensor types it really
// holds. `veloxquant inspect --calib FILE`: what a calibration file holds (for RateQuant,
// the per-layer bit allocation and its probe table).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

#include "src/engine/chat_template.h"
#include "src/engine/gguf.h"
#include "src/engine/model.h"
#include "tools/veloxquant/calibration_args.h"
#include "tools/veloxquant/cli_util.h"
#include "tools/veloxquant/commands.h"

namespace vq::cli {
namespace {

// Printable form of bytes that may not be UTF-8: control and high bytes as \xNN.
std::string printable(const std::string& s, size_t max_len = 80) {
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < max_len; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (out.size() >= max_len) out += "...";
  return out;
}

std::string value_text(const engine::GgufValue& v) {
  using engine::GgufArray;
  if (const auto* i = std::get_if<int64_t>(&v.v)) return fmt::format("{}", *i);
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return fmt::format("{}", *u);
  if (const auto* d = std::get_if<double>(&v.v)) return fmt::format("{:g}", *d);
  if (const auto* b = std::get_if<bool>(&v.v)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&v.v)) return "\"" + printable(*s) + "\"";
  const auto& a = std::get<GgufArray>(v.v);
  std::string items;
  const size_t show = 8;
  for (size_t i = 0; i < std::min<uint64_t>(a.count, show); ++i) {
    if (!items.empty()) items += ", ";
    if (!a.strings.empty()) items += "\"" + printable(a.strings[i], 24) + "\"";
    else if (!a.floats.empty()) items += fmt::format("{:g}", a.floats[i]);
    else if (!a.u64.empty()) items += fmt::format("{}", a.u64[i]);
    else items += fmt::format("{}", a.ints[i]);
  }
  return fmt::format("[{} x {}] [{}{}]", engine::gguf_type_name(a.type), a.count, items, a.count > show ? ", ..." : "");
}

// A string key's value for the summary: printable, or why there is none.
std::string string_key(const engine::GgufFile& f, const std::string& key) {
  const engine::GgufValue* v = f.find(key);
  if (!v) return "(absent)";
  const auto* s = std::get_if<std::string>(&v->v);
  return s ? printable(*s) : fmt::format("(not a string: {})", engine::gguf_type_name(v->type));
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// The chat template chat would use, and how it was found.
std::string chat_template_line(const engine::GgufFile& f) {
  try {
    std::string how;
    const engine::ChatTemplate t = engine::model_chat_template(f, &how);
    if (t == engine::ChatTemplate::kUnknown) {
      return "unknown (tokenizer.chat_template is none of llama.cpp's; chat needs --chat-template NAME)";
    }
    return fmt::format("{} ({}{})", engine::chat_template_name(t), how,
                       engine::chat_template_formats(t) ? "" : "; not supported here: chat needs --chat-template NAME");
  } catch (const Error& e) {
    return "unknown (" + one_line(e.what()) + ")";
  }
}

// Whether the engine loads the file (architecture, hyperparameters, tensors, tokenizer).
std::string runs_line(const std::string& path) {
  try {
    engine::Model::load(path);
    return "yes";
  } catch (const std::exception& e) {
    return "no — " + one_line(e.what());
  }
}

}  // namespace

Runner add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Print a GGUF file's metadata and tensor table, or a calibration file");
  auto model = std::make_shared<std::string>();
  auto calib = std::make_shared<std::string>();
  auto no_tensors = std::make_shared<bool>(false);
  auto* m_opt = cmd->add_option("-m,--model", *model, "GGUF file");
  auto* c_opt = cmd->add_option("--calib", *calib, "Calibration file (from `veloxquant calibrate`)");
  m_opt->excludes(c_opt);
  cmd->add_flag("--no-tensors", *no_tensors, "Only metadata and the type summary");
  cmd->callback([model, calib]() {
    VQ_CHECK(!model->empty() || !calib->empty(), "inspect: give -m MODEL or --calib FILE");
  });
  return [model, calib, no_tensors]() {
    if (!calib->empty()) {
      const kv::Calibration c = kv::load_calibration(*calib);
      fmt::print("file: {}\n", *calib);
      print_calibration(c);
      return 0;
    }
    const auto f = engine::GgufFile::open(*model);
    fmt::print("file: {}\nGGUF version {}, {} bytes, alignment {}, data at byte {}\n\n", *model, f->version(),
               f->file_size(), f->alignment(), f->data_offset());
    fmt::print("architecture: {}\n", string_key(*f, "general.architecture"));
    fmt::print("tokenizer: {} (pre: {})\n", string_key(*f, "tokenizer.ggml.model"), string_key(*f, "tokenizer.ggml.pre"));
    fmt::print("chat template: {}\n", chat_template_line(*f));
    fmt::print("runs: {}\n\n", runs_line(*model));
    fmt::print("metadata ({} keys):\n", f->metadata().size());
    for (const auto& [key, v] : f->metadata()) {
      fmt::print("  {} ({}) = {}\n", printable(key), engine::gguf_type_name(v.type), value_text(v));
    }
    std::map<std::string, std::pair<int, uint64_t>> by_type;
    std::vector<std::vector<std::string>> rows = {{"tensor", "type", "shape", "offset", "bytes"}};
    for (const auto& t : f->tensors()) {
      const auto* info = engine::ggml_type_info(t.type);
      std::string shape;
      for (uint64_t d : t.shape) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
      rows.push_back({printable(t.name), info->name, shape, std::to_string(t.offset), std::to_string(t.n_bytes)});
      by_type[info->name].first += 1;
      by_type[info->name].second += t.n_bytes;
    }
    if (!*no_tensors) {
      fmt::print("\ntensors ({}):\n", f->tensors().size());
      print_table(rows);
    }
    fmt::print("\ntensor types held:\n");
    for (const auto& [name, cb] : by_type) {
      fmt::print("  {:<6} {:>4} tensors  {:>12} bytes\n", name, cb.first, cb.second);
    }
    return 0;
  };
}

}  // namespace vq::cli
