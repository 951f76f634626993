#include "tools/veloxquant/calibration_args.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <memory>
#include <sstream>

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

}  // namespace vq::cli
