// Fuzzes the tokenizer with arbitrary bytes (not necessarily UTF-8), with and without special
// tokens: encoding never fails, ids are in range, and decoding gives back bytes. Uses Gemma 3's
// tokenizer when the model has been fetched (models/), else the corpus's tiny model.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "src/engine/gguf.h"
#include "src/engine/tokenizer.h"

namespace {
std::unique_ptr<vq::engine::GgufFile> g_file;
std::unique_ptr<vq::engine::Tokenizer> g_tok;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string gemma = std::string(VQ_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  const std::string tiny = std::string(VQ_SOURCE_DIR) + "/tests/data/gguf_corpus/ok_tiny_llama.gguf";
  g_file = vq::engine::GgufFile::open(std::filesystem::exists(gemma) ? gemma : tiny);
  g_tok = std::make_unique<vq::engine::Tokenizer>(*g_file);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool special : {false, true}) {
    const auto ids = g_tok->encode(text, special, special);
    for (int32_t id : ids) {
      if (id < 0 || id >= g_tok->n_vocab()) std::abort();
    }
    (void)g_tok->decode(ids, special);
  }
  return 0;
}
