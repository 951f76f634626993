#include "src/core/meminfo.h"

#include <fstream>
#include <string>

namespace vq {

size_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  size_t kb = 0;
  while (f >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

}  // namespace vq
