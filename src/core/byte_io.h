// ByteWriter and ByteReader: little-endian fields into and out of a byte buffer. The reader is
// for bytes from outside: every read is bounds-checked and a short buffer is an error that
// names the file and the field, never a read past the end.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "veloxquant/error.h"

namespace vq {

class ByteWriter {
 public:
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    if (n == 0) return;
    // No real field comes near this; saying so also bounds n for the compiler's overflow check.
    if (n > (size_t(1) << 48)) throw_error(ErrorKind::kInternal, "ByteWriter: field too large");
    const size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, p, n);
  }
  const std::vector<uint8_t>& data() const { return out_; }
  std::vector<uint8_t>& data() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* p, size_t n, std::string what) : p_(p), n_(n), what_(std::move(what)) {}

  uint32_t u32(const char* field) {
    uint32_t v;
    raw(&v, 4, field);
    return v;
  }
  uint64_t u64(const char* field) {
    uint64_t v;
    raw(&v, 8, field);
    return v;
  }
  int64_t i64(const char* field) {
    int64_t v;
    raw(&v, 8, field);
    return v;
  }
  // A count that must lie in [lo, hi].
  int64_t i64_in(const char* field, int64_t lo, int64_t hi) {
    const int64_t v = i64(field);
    check(v >= lo && v <= hi, field, fmt::format("{} outside [{}, {}]", v, lo, hi));
    return v;
  }
  std::string str(const char* field, size_t max_len) {
    const uint64_t n = u64(field);
    check(n <= max_len && n <= remaining(), field, fmt::format("length {} out of range", n));
    std::string s(reinterpret_cast<const char*>(p_ + at_), size_t(n));
    at_ += size_t(n);
    return s;
  }
  void raw(void* dst, size_t n, const char* field) {
    check(n <= remaining(), field, fmt::format("needs {} bytes, {} left", n, remaining()));
    if (n == 0) return;  // dst may be null for an empty buffer
    std::memcpy(dst, p_ + at_, n);
    at_ += n;
  }
  size_t remaining() const { return n_ - at_; }
  [[noreturn]] void fail(const char* field, const std::string& why) const {
    throw_error(ErrorKind::kData, fmt::format("{}: {}: {}", what_, field, why));
  }
  void check(bool ok, const char* field, const std::string& why) const {
    if (!ok) fail(field, why);
  }

 private:
  const uint8_t* p_;
  size_t n_, at_ = 0;
  std::string what_;
};

}  // namespace vq
