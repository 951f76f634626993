#include "src/core/checked_file.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "src/core/byte_io.h"
#include "veloxquant/error.h"

namespace vq {
namespace {

constexpr size_t kHeader = 8 + 4 + 8;

uint32_t crc(const uint8_t* p, size_t n) {
  uLong c = crc32_z(0L, Z_NULL, 0);
  return uint32_t(crc32_z(c, p, n));
}

}  // namespace

void write_checked_file(const std::string& path, const char (&magic)[9], uint32_t version,
                        const std::vector<uint8_t>& payload) {
  ByteWriter w;
  w.raw(magic, 8);
  w.u32(version);
  w.u64(payload.size());
  w.raw(payload.data(), payload.size());
  w.u32(crc(w.data().data(), w.data().size()));
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  VQ_CHECK(f, fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
  const size_t n = std::fwrite(w.data().data(), 1, w.data().size(), f);
  const bool ok = n == w.data().size() && std::fflush(f) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    std::remove(tmp.c_str());
    throw_error(ErrorKind::kData, fmt::format("{}: write failed (disk full?)", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  VQ_CHECK(!ec, fmt::format("{}: cannot rename into place: {}", path, ec.message()));
}

void check_checked_file_writable(const std::string& path) {
  const std::string tmp = path + ".tmp";
  const bool existed = std::filesystem::exists(tmp);
  std::FILE* f = std::fopen(tmp.c_str(), "ab");
  VQ_CHECK(f, fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
  std::fclose(f);
  if (!existed) std::remove(tmp.c_str());
}

std::vector<uint8_t> read_checked_file(const std::string& path, const char (&magic)[9], uint32_t version) {
  uint32_t read = 0;
  return read_checked_file(path, magic, version, version, &read);
}

std::vector<uint8_t> read_checked_file(const std::string& path, const char (&magic)[9], uint32_t min_version,
                                       uint32_t max_version, uint32_t* version) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  VQ_CHECK(f, fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::vector<uint8_t> buf;
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0) buf.insert(buf.end(), chunk, chunk + n);
  const bool err = std::ferror(f) != 0;
  std::fclose(f);
  VQ_CHECK_DATA(!err, fmt::format("{}: read error", path));
  VQ_CHECK_DATA(buf.size() >= kHeader + 4 && std::memcmp(buf.data(), magic, 8) == 0,
                fmt::format("{}: not a {} file (bad magic or too short)", path, std::string(magic, 8)));
  ByteReader r(buf.data() + 8, buf.size() - 8, path);
  const uint32_t v = r.u32("version");
  VQ_CHECK_DATA(v >= min_version && v <= max_version,
                min_version == max_version
                    ? fmt::format("{}: format version {}, this build reads version {}", path, v, min_version)
                    : fmt::format("{}: format version {}, this build reads versions {} to {}", path, v, min_version,
                                  max_version));
  *version = v;
  const uint64_t size = r.u64("payload size");
  VQ_CHECK_DATA(size == buf.size() - kHeader - 4,
                fmt::format("{}: payload size {} but the file holds {} bytes (truncated or damaged)", path, size,
                            buf.size() - kHeader - 4));
  uint32_t stored;
  std::memcpy(&stored, buf.data() + buf.size() - 4, 4);
  VQ_CHECK_DATA(crc(buf.data(), buf.size() - 4) == stored, fmt::format("{}: checksum mismatch (damaged file)", path));
  return std::vector<uint8_t>(buf.begin() + kHeader, buf.end() - 4);
}

}  // namespace vq
