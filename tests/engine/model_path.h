// Where tests find the real model (fetched by scripts/fetch-model, part of the test command's
// set-up) and the golden data.
#pragma once

#include <cstdlib>
#include <string>

namespace vq::engine::testing {

inline std::string source_dir() { return VQ_SOURCE_DIR; }

inline std::string model_path() {
  if (const char* p = std::getenv("VQ_MODEL")) return p;
  return source_dir() + "/models/gemma-3-270m-q4_k_m.gguf";
}

inline std::string golden(const std::string& name) { return source_dir() + "/tests/golden/" + name; }

}  // namespace vq::engine::testing
