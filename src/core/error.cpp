// Out-of-line throwers keep VQ_CHECK cheap at its call sites.
#include "veloxquant/error.h"

#include <fmt/format.h>

namespace vq {

void throw_error(ErrorKind kind, const std::string& what) { throw Error(kind, what); }

void throw_internal(const char* expr, const char* file, int line) {
  throw Error(ErrorKind::kInternal, fmt::format("internal error: {} failed at {}:{}", expr, file, line));
}

}  // namespace vq
