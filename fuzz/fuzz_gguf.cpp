// Fuzzes the GGUF reader and the model loader built on it: any bytes either load as a model
// (then a prompt is tokenized and one token run through it with an fp16 cache) or are refused
// with vq::Error. Anything else (a crash, a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/engine/model.h"
#include "src/engine/session.h"
#include "veloxquant/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto model = vq::engine::Model::load(
        vq::engine::GgufFile::from_memory(std::vector<uint8_t>(data, data + size), "fuzz.gguf"));
    const auto ids = model->tokenizer().encode("ab");
    if (!ids.empty() && model->config().n_embd <= 256 && model->config().n_vocab <= 4096) {
      vq::engine::Session s(*model, vq::kv::parse_method("fp16"), 8, 4);
      std::vector<float> logits;
      s.feed({ids[0]}, &logits);
    }
  } catch (const vq::Error&) {
  }
  return 0;
}
