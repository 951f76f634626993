// A small GGUF writer for tests: builds valid files, and lets a test corrupt any field.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace vq::engine::testing {

class GgufWriter {
 public:
  void kv_u32(const std::string& k, uint32_t v) { key(k, 4); put(v); ++n_kv_; }
  void kv_f32(const std::string& k, float v) { key(k, 6); put(v); ++n_kv_; }
  void kv_bool(const std::string& k, bool v) { key(k, 7); put(uint8_t(v)); ++n_kv_; }
  void kv_str(const std::string& k, const std::string& v) { key(k, 8); str(meta_, v); ++n_kv_; }
  void kv_str_array(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    put(uint32_t(8));
    put(uint64_t(v.size()));
    for (const auto& s : v) str(meta_, s);
    ++n_kv_;
  }
  void kv_f32_array(const std::string& k, const std::vector<float>& v) {
    key(k, 9);
    put(uint32_t(6));
    put(uint64_t(v.size()));
    for (float x : v) put(x);
    ++n_kv_;
  }
  void kv_i32_array(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9);
    put(uint32_t(5));
    put(uint64_t(v.size()));
    for (int32_t x : v) put(x);
    ++n_kv_;
  }
  // Adds a tensor; data is appended at the next aligned offset.
  void tensor(const std::string& name, const std::vector<uint64_t>& shape, uint32_t type,
              const std::vector<uint8_t>& bytes) {
    while (data_.size() % alignment_) data_.push_back(0);
    str(infos_, name);
    put_to(infos_, uint32_t(shape.size()));
    for (uint64_t d : shape) put_to(infos_, d);
    put_to(infos_, type);
    put_to(infos_, uint64_t(data_.size()));
    data_.insert(data_.end(), bytes.begin(), bytes.end());
    ++n_tensors_;
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    out.reserve(24 + meta_.size() + infos_.size() + alignment_ + data_.size());
    put_to(out, uint32_t(0x46554747));
    put_to(out, uint32_t(3));
    put_to(out, n_tensors_);
    put_to(out, n_kv_);
    out.insert(out.end(), meta_.begin(), meta_.end());
    out.insert(out.end(), infos_.begin(), infos_.end());
    while (out.size() % alignment_) out.push_back(0);
    out.insert(out.end(), data_.begin(), data_.end());
    return out;
  }
  static void save(const std::string& path, const std::vector<uint8_t>& b) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }

 private:
  template <typename T>
  static void put_to(std::vector<uint8_t>& v, T x) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    v.insert(v.end(), b, b + sizeof(T));
  }
  template <typename T>
  void put(T x) { put_to(meta_, x); }
  static void str(std::vector<uint8_t>& v, const std::string& s) {
    put_to(v, uint64_t(s.size()));
    v.insert(v.end(), s.begin(), s.end());
  }
  void key(const std::string& k, uint32_t type) {
    str(meta_, k);
    put(type);
  }
  std::vector<uint8_t> meta_, infos_, data_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
  size_t alignment_ = 32;
};

}  // namespace vq::engine::testing
