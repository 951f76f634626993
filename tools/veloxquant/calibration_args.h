// What the commands that run a model share about calibration: the --calib option, turning a
// spec into a method that carries its calibration (checked against the spec and the model),
// and reading one part of a text file (calibrate on one half, evaluate on the other).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "src/engine/model.h"
#include "veloxquant/kv/calibration.h"
#include "veloxquant/kv/method.h"

namespace vq::cli {

void add_calib_option(CLI::App* cmd, std::vector<std::string>* files);
void add_part_option(CLI::App* cmd, std::string* part);

// The method of `spec`; one that needs a calibration gets the one among `files` made for this
// spec, after checking it was made for this model. Errors name the file and what is wrong.
kv::Method method_for_model(const std::string& spec, const std::vector<std::string>& files,
                            const engine::Model& model);

// The bytes of `path`, or of its first or second half ("all", "first-half", "second-half"),
// split at the first newline after the middle so that no line is cut.
std::string read_text_part(const std::string& path, const std::string& part);

// What a calibration holds, as text: the header, and per layer the RateQuant allocation with its
// probe KL at each width, or the learned datatypes' levels.
void print_calibration(const kv::Calibration& c);

}  // namespace vq::cli
