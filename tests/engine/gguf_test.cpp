// The GGUF reader: a valid file reads back exactly; malformed files (truncated anywhere, huge
// counts, offsets past the end, overlapping or misaligned tensors, unknown types, bad bools)
// are rejected with a vq::Error of kind kData that names the file.
#include "src/engine/gguf.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "src/engine/model.h"

#include "tests/engine/gguf_writer.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

using testing::GgufWriter;

std::string tmp_path(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::vector<uint8_t> valid_file() {
  GgufWriter w;
  w.kv_str("general.architecture", "llama");
  w.kv_u32("llama.block_count", 2);
  w.kv_f32("llama.rope.freq_base", 10000.0f);
  w.kv_bool("tokenizer.ggml.add_bos_token", true);
  w.kv_str_array("tokenizer.ggml.tokens", {"<unk>", "a", "\xff\xfe"});
  w.tensor("a", {4, 2}, 0, std::vector<uint8_t>(32, 1));
  w.tensor("b", {32}, 8, std::vector<uint8_t>(34, 2));
  return w.bytes();
}

TEST(Gguf, ReadsValidFile) {
  const std::string p = tmp_path("valid.gguf");
  GgufWriter::save(p, valid_file());
  const auto f = GgufFile::open(p);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("llama.block_count"), 2);
  EXPECT_FLOAT_EQ(float(f->get_float("llama.rope.freq_base")), 10000.0f);
  EXPECT_TRUE(f->get_bool("tokenizer.ggml.add_bos_token", false));
  EXPECT_EQ(f->get_array("tokenizer.ggml.tokens").strings[2], "\xff\xfe");
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensor("a").n_bytes, 32u);
  EXPECT_EQ(f->tensor("b").n_bytes, 34u);
  EXPECT_EQ(f->tensor("b").data[0], 2);
  EXPECT_EQ(f->tensor("a").data[31], 1);
  EXPECT_THROW(f->tensor("missing"), Error);
  EXPECT_THROW(f->get_int("general.architecture"), Error);
}

// Reading the file into memory (GgufLoad::kRead) gives what mapping it gives, byte for byte, and
// refuses the same damaged files.
TEST(Gguf, ReadIntoMemoryEqualsMapped) {
  const std::string p = tmp_path("read.gguf");
  const auto bytes = valid_file();
  GgufWriter::save(p, bytes);
  const auto mapped = GgufFile::open(p, GgufLoad::kMap);
  const auto read = GgufFile::open(p, GgufLoad::kRead);
  EXPECT_EQ(read->file_size(), bytes.size());
  EXPECT_EQ(read->content_crc32(), mapped->content_crc32());
  EXPECT_EQ(read->metadata().size(), mapped->metadata().size());
  ASSERT_EQ(read->tensors().size(), mapped->tensors().size());
  for (size_t i = 0; i < read->tensors().size(); ++i) {
    const GgufTensor &a = read->tensors()[i], &b = mapped->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    ASSERT_EQ(a.n_bytes, b.n_bytes);
    EXPECT_NE(a.data, b.data);  // its own copy
    EXPECT_EQ(0, std::memcmp(a.data, b.data, a.n_bytes)) << a.name;
  }
  for (size_t n : {size_t(0), size_t(7), bytes.size() / 2, bytes.size() - 1}) {
    const std::string cut = tmp_path("read-cut.gguf");
    GgufWriter::save(cut, std::vector<uint8_t>(bytes.begin(), bytes.begin() + std::ptrdiff_t(n)));
    try {
      GgufFile::open(cut, GgufLoad::kRead);
      ADD_FAILURE() << "a file cut to " << n << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kData) << e.what();
    }
  }
}

void expect_rejected(const std::vector<uint8_t>& bytes, const std::string& name) {
  const std::string p = tmp_path(name + ".gguf");
  GgufWriter::save(p, bytes);
  try {
    GgufFile::open(p);
    ADD_FAILURE() << name << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData) << name << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(Gguf, RejectsEveryTruncation) {
  const auto good = valid_file();
  // Cut anywhere before the end of the last tensor's data.
  for (size_t n = 0; n < good.size(); n += (n < 400 ? 1 : 7)) {
    expect_rejected(std::vector<uint8_t>(good.begin(), good.begin() + long(n)), "trunc" + std::to_string(n));
  }
}

void patch_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); }
void patch_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }

TEST(Gguf, RejectsBadHeaders) {
  auto b = valid_file();
  b[0] = 'X';
  expect_rejected(b, "magic");
  b = valid_file();
  patch_u32(b, 4, 1);
  expect_rejected(b, "version1");
  b = valid_file();
  patch_u64(b, 8, uint64_t(1) << 60);
  expect_rejected(b, "huge_tensor_count");
  b = valid_file();
  patch_u64(b, 16, uint64_t(1) << 60);
  expect_rejected(b, "huge_kv_count");
  b = valid_file();
  patch_u64(b, 24, uint64_t(1) << 62);  // first key's length
  expect_rejected(b, "huge_key_length");
}

TEST(Gguf, RejectsBadTensors) {
  const auto make = [](std::function<void(GgufWriter&)> add) {
    GgufWriter w;
    w.kv_str("general.architecture", "llama");
    add(w);
    return w.bytes();
  };
  expect_rejected(make([](GgufWriter& w) { w.tensor("t", {4}, 77, std::vector<uint8_t>(16)); }), "unknown_type");
  expect_rejected(make([](GgufWriter& w) { w.tensor("t", {33}, 8, std::vector<uint8_t>(68)); }), "partial_block");
  expect_rejected(make([](GgufWriter& w) { w.tensor("t", {0}, 0, {}); }), "zero_dim");
  expect_rejected(make([](GgufWriter& w) { w.tensor("t", {1, 1, 1, 1, 1}, 0, std::vector<uint8_t>(4)); }), "five_dims");
  expect_rejected(make([](GgufWriter& w) { w.tensor("t", {1024}, 0, std::vector<uint8_t>(16)); }), "data_past_end");
  expect_rejected(make([](GgufWriter& w) {
                    w.tensor("t", {4}, 0, std::vector<uint8_t>(16));
                    w.tensor("t", {4}, 0, std::vector<uint8_t>(16));
                  }),
                  "duplicate_name");
  expect_rejected(make([](GgufWriter& w) { w.tensor("t", {uint64_t(1) << 39, uint64_t(1) << 39}, 0, {}); }), "overflow");
}

TEST(Gguf, RejectsOverlapAndMisalignment) {
  GgufWriter w;
  w.tensor("a", {8}, 0, std::vector<uint8_t>(32));
  w.tensor("b", {8}, 0, std::vector<uint8_t>(32));
  auto b = w.bytes();
  // Tensor infos start at 24 (no metadata): name(8+1) n_dims(4) dim(8) type(4) offset(8).
  const size_t second_offset = 24 + (8 + 1 + 4 + 8 + 4 + 8) + (8 + 1 + 4 + 8 + 4);
  patch_u64(b, second_offset, 0);
  expect_rejected(b, "overlap");
  patch_u64(b, second_offset, 33);
  expect_rejected(b, "misaligned");
}

TEST(Gguf, RejectsBadValues) {
  GgufWriter w;
  w.kv_bool("flag", true);
  auto b = w.bytes();
  b[24 + 8 + 4 + 4] = 7;  // the bool after key "flag" and its type: neither 0 nor 1
  expect_rejected(b, "bad_bool");
  GgufWriter a;
  a.kv_u32("general.alignment", 3);
  expect_rejected(a.bytes(), "alignment_not_pow2");
}

// The committed corpus of malformed files (tests/data/gguf_corpus): each is refused as bad data
// by the full model loader, naming the file; the valid tiny model loads. Run under ASan/UBSan by
// scripts/test-sanitizers.
TEST(Gguf, CorpusOfMalformedFilesRefused) {
  const std::string dir = std::string(VQ_SOURCE_DIR) + "/tests/data/gguf_corpus";
  EXPECT_NO_THROW(Model::load(dir + "/ok_tiny_llama.gguf"));
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string p = e.path().string();
    if (e.path().filename().string().rfind("bad_", 0) != 0) continue;
    ++n;
    try {
      Model::load(p);
      ADD_FAILURE() << p << " was accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::kData) << p << ": " << err.what();
      EXPECT_NE(std::string(err.what()).find(p), std::string::npos) << err.what();
    }
  }
  EXPECT_GE(n, 30);
}

TEST(Gguf, MissingFileIsUsageError) {
  try {
    GgufFile::open(tmp_path("does-not-exist.gguf"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  }
}

}  // namespace
}  // namespace vq::engine
