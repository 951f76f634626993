// GGUF (v2/v3) reader over a read-only memory map. Every count, length, offset and size is
// checked with overflow-safe arithmetic before use; a bad file raises vq::Error (kData) naming
// the file, the field and the reason. Nothing read is trusted to be UTF-8 or in range.
// Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <optional>
#include <vector>

namespace vq::engine {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* gguf_type_name(GgufType t);

// ggml tensor types this project knows the block layout of.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kBF16 = 30,
};
struct GgmlTypeInfo {
  const char* name;
  int block_elems;    // elements per block
  int block_bytes;    // bytes per block
};
// Null for a type id this project does not know.
const GgmlTypeInfo* ggml_type_info(uint32_t type);

struct GgufArray {
  GgufType type = GgufType::kUint8;
  uint64_t count = 0;
  // Scalars are widened: integers and bools to int64 (uint64 values above INT64_MAX are kept
  // in `u64`), floats to double, strings kept as bytes.
  std::vector<int64_t> ints;
  std::vector<uint64_t> u64;
  std::vector<double> floats;
  std::vector<std::string> strings;
};

struct GgufValue {
  GgufType type = GgufType::kUint8;
  std::variant<int64_t, uint64_t, double, bool, std::string, GgufArray> v;
};

struct GgufTensor {
  std::string name;
  uint32_t type = 0;
  std::vector<uint64_t> shape;  // ne[0] (contiguous) first, as ggml
  uint64_t offset = 0;          // from the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;
};

// How GgufFile::open brings a file's bytes in. kMap maps the file: nothing is read until used, and
// processes share the page cache. kRead copies it into the process's own memory first, as
// llama.cpp does with `--no-mmap` and with every tensor it repacks: on the machines measured,
// weights streamed from private memory decode faster than the same bytes mapped from the page
// cache (docs/performance.md, "Where the weights live"). A file larger than the memory the system
// reports available (MemAvailable) is mapped even when kRead is asked for.
enum class GgufLoad { kMap, kRead };

class GgufFile {
 public:
  // Maps (or reads) and validates the file. Throws vq::Error (kData) for a malformed file, (kUsage)
  // for one that cannot be opened or read.
  static std::unique_ptr<GgufFile> open(const std::string& path, GgufLoad how = GgufLoad::kMap);
  // The same checks over bytes already in memory (fuzzing, tests); `name` stands for the path.
  static std::unique_ptr<GgufFile> from_memory(std::vector<uint8_t> bytes, const std::string& name);
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }
  // CRC-32 of the whole file: the model's identity in saved caches and calibration artifacts.
  // Computed once (a pass over the whole file), then remembered: chat saves after every turn.
  uint32_t content_crc32() const;

  // Metadata in file order, and by key.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed accessors; a missing key or a wrong type throws naming the key.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  const GgufArray& get_array(const std::string& key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;
  const GgufTensor& tensor(const std::string& name) const;  // throws if absent

 private:
  GgufFile() = default;
  void parse();

  std::string path_;
  int fd_ = -1;
  void* map_ = nullptr;         // the mapping base_ lies in (of the file, or private memory), if any
  size_t map_len_ = 0;
  std::vector<uint8_t> owned_;  // from_memory: the bytes (base_ points into them)
  mutable std::optional<uint32_t> crc_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace vq::engine
