// write_synthetic_model NAME OUT.gguf [VOCAB_DIR]: writes the random-weight model NAME of
// tests/engine/synthetic_model.h (its vocabulary from VOCAB_DIR, default tests/data/vocab of the
// source tree). Used by the golden-data commands (tests/golden/arch/COMMANDS.md) and CLI tests.
#include <cstdio>
#include <exception>
#include <string>

#include "tests/engine/synthetic_model.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: write_synthetic_model NAME OUT.gguf [VOCAB_DIR]\n");
    return 2;
  }
  try {
    const auto& spec = vq::engine::testing::synthetic_spec(argv[1]);
    const std::string dir = argc > 3 ? argv[3] : std::string(VQ_SOURCE_DIR) + "/tests/data/vocab";
    vq::engine::testing::write_synthetic_model(spec, dir + "/" + spec.vocab, argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_synthetic_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
