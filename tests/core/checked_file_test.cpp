// Checked files: a round trip keeps the payload; every single-byte change anywhere in the file,
// every truncation, and a wrong magic or version are refused as bad data.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "src/core/checked_file.h"
#include "veloxquant/error.h"

namespace vq {
namespace {

std::vector<uint8_t> read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_all(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

bool refused_as_data(const std::string& p) {
  try {
    read_checked_file(p, "TESTFILE", 3);
  } catch (const Error& e) {
    return e.kind() == ErrorKind::kData;
  }
  return false;
}

TEST(CheckedFile, RoundTripAndEveryByteFlipDetected) {
  const std::string path = ::testing::TempDir() + "checked_file_test.bin";
  std::vector<uint8_t> payload(300);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 7 + 1);
  write_checked_file(path, "TESTFILE", 3, payload);
  EXPECT_EQ(read_checked_file(path, "TESTFILE", 3), payload);
  const auto good = read_all(path);
  ASSERT_EQ(good.size(), payload.size() + 24);
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      auto bad = good;
      bad[i] ^= flip;
      write_all(path, bad);
      ASSERT_TRUE(refused_as_data(path)) << "byte " << i << " flip " << int(flip);
    }
  }
  for (size_t n : {size_t(0), size_t(5), size_t(20), good.size() - 1}) {
    write_all(path, std::vector<uint8_t>(good.begin(), good.begin() + long(n)));
    EXPECT_TRUE(refused_as_data(path)) << "truncated to " << n;
  }
  write_all(path, good);
  EXPECT_THROW(read_checked_file(path, "OTHERKND", 3), Error);
  EXPECT_THROW(read_checked_file(path, "TESTFILE", 4), Error);
  std::remove(path.c_str());
}

TEST(CheckedFile, MissingFileIsUsageError) {
  try {
    read_checked_file(::testing::TempDir() + "no_such_file.bin", "TESTFILE", 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  }
}

}  // namespace
}  // namespace vq
