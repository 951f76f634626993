// Fuzzes method spec strings: any text either parses (and the method then builds its codecs for
// a few head sizes, which may refuse a size with vq::Error) or is refused with vq::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "veloxquant/error.h"
#include "veloxquant/kv/method.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const vq::kv::Method m = vq::kv::parse_method(text);
    for (int d : {32, 48, 64}) {
      try {
        m.keys().key_codec({d, 1});
        m.values().value_codec({d, 1});
        (void)m.keys().key_bits(d);
      } catch (const vq::Error&) {
      }
    }
    (void)vq::kv::parse_method(m.spec());  // the canonical form parses again
  } catch (const vq::Error&) {
  }
  return 0;
}
