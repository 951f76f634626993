// The llama.cpp vocabulary files in tests/data/vocab/ (see its README.md): listing them, and
// opening one whether stored plain (.gguf) or gzip-compressed (.gguf.gz).
#pragma once

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/engine/gguf.h"
#include "tests/engine/model_path.h"

namespace vq::engine::testing {

inline std::string vocab_dir() { return source_dir() + "/tests/data/vocab"; }

// "ggml-vocab-gpt-2.gguf" for ".../ggml-vocab-gpt-2.gguf.gz" or ".../ggml-vocab-gpt-2.gguf".
inline std::string vocab_name(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0) name.resize(name.size() - 3);
  return name;
}

// Every vocab file, sorted by name.
inline std::vector<std::string> vocab_files() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(vocab_dir(), ec)) {
    const std::string p = e.path().string();
    const std::string name = e.path().filename().string();
    const auto ends = [&](const std::string& s) {
      return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends(".gguf") || ends(".gguf.gz")) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::unique_ptr<GgufFile> open_vocab(const std::string& path) {
  if (path.size() < 3 || path.compare(path.size() - 3, 3, ".gz") != 0) return GgufFile::open(path);
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) throw std::runtime_error("cannot open " + path);
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  int n = 0;
  while ((n = gzread(gz, buf, sizeof(buf))) > 0) bytes.insert(bytes.end(), buf, buf + n);
  const bool ok = n == 0;
  gzclose(gz);
  if (!ok) throw std::runtime_error("cannot decompress " + path);
  return GgufFile::from_memory(std::move(bytes), path);
}

}  // namespace vq::engine::testing
