// vq::Error: the one exception type for bad input (a spec, a file, a shape), naming what was wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace vq {

// What kind of mistake, so the CLI can choose its exit status: usage errors (a bad spec or
// flag) exit 2, bad data (a damaged file) exits 1.
enum class ErrorKind { kUsage, kData, kInternal };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] void throw_error(ErrorKind kind, const std::string& what);
[[noreturn]] void throw_internal(const char* expr, const char* file, int line);

}  // namespace vq

// VQ_CHECK: the caller gave us something wrong (usage). VQ_CHECK_DATA: a file is wrong.
// VQ_ASSERT: our own invariant; a failure is a bug, reported with file and line.
#define VQ_CHECK(cond, msg)                                      \
  do {                                                           \
    if (!(cond)) ::vq::throw_error(::vq::ErrorKind::kUsage, msg); \
  } while (0)
#define VQ_CHECK_DATA(cond, msg)                                \
  do {                                                          \
    if (!(cond)) ::vq::throw_error(::vq::ErrorKind::kData, msg); \
  } while (0)
#define VQ_ASSERT(cond)                                                 \
  do {                                                                  \
    if (!(cond)) ::vq::throw_internal(#cond, __FILE__, __LINE__);       \
  } while (0)
#ifdef NDEBUG
#define VQ_DASSERT(cond) \
  do {                   \
  } while (0)
#else
#define VQ_DASSERT(cond) VQ_ASSERT(cond)
#endif
