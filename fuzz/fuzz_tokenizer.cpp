// Fuzzes the tokenizers with arbitrary bytes (not necessarily UTF-8), with and without special
// tokens: encoding never fails, ids are in range, decoding gives back bytes, and streaming
// detokenization gives the same bytes as decode. SentencePiece: Gemma 3's tokenizer when the model
// has been fetched (models/), else the corpus's tiny model. Byte-level BPE: GPT-2's and (when
// present) Llama 3's vocabularies from tests/data/vocab/; for them, decoding valid UTF-8 text
// without special tokens gives it back.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "src/engine/detokenizer.h"
#include "src/engine/gguf.h"
#include "src/engine/tokenizer.h"

namespace {
std::vector<std::unique_ptr<vq::engine::GgufFile>> g_files;
std::vector<std::unique_ptr<vq::engine::Tokenizer>> g_toks;

std::unique_ptr<vq::engine::GgufFile> open_gz(const std::string& path) {
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) return nullptr;
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  int n = 0;
  while ((n = gzread(gz, buf, sizeof(buf))) > 0) bytes.insert(bytes.end(), buf, buf + n);
  gzclose(gz);
  return vq::engine::GgufFile::from_memory(std::move(bytes), path);
}

void add(std::unique_ptr<vq::engine::GgufFile> f) {
  if (f == nullptr) return;
  g_toks.push_back(std::make_unique<vq::engine::Tokenizer>(*f));
  g_files.push_back(std::move(f));
}

// Whether `s` is valid UTF-8 without surrogates or overlong forms (what the BPE path gives back
// unchanged).
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      n = 1, cp = c;
    } else if (c >= 0xC2 && c < 0xE0) {
      n = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c < 0xF0) {
      n = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c < 0xF5) {
      n = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = VQ_SOURCE_DIR;
  const std::string gemma = dir + "/models/gemma-3-270m-q4_k_m.gguf";
  const std::string tiny = dir + "/tests/data/gguf_corpus/ok_tiny_llama.gguf";
  add(vq::engine::GgufFile::open(std::filesystem::exists(gemma) ? gemma : tiny));
  add(open_gz(dir + "/tests/data/vocab/ggml-vocab-gpt-2.gguf.gz"));
  const std::string llama3 = dir + "/tests/data/vocab/ggml-vocab-llama-bpe.gguf";
  if (std::filesystem::exists(llama3)) add(vq::engine::GgufFile::open(llama3));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const auto& tok : g_toks) {
    for (bool special : {false, true}) {
      const auto ids = tok->encode(text, special, special);
      for (int32_t id : ids) {
        if (id < 0 || id >= tok->n_vocab()) std::abort();
      }
      const std::string decoded = tok->decode(ids, special);
      vq::engine::Detokenizer d(*tok, special);
      std::string streamed;
      for (int32_t id : ids) streamed += d.push(id);
      streamed += d.flush();
      if (streamed != decoded) std::abort();
      if (tok->is_bpe() && !special && decoded != text && valid_utf8(text)) std::abort();
    }
  }
  return 0;
}
