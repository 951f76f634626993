// GGUF parsing with a bounds-checked cursor. Limits are derived from the bytes that remain, so a
// huge count in a small file fails before any allocation.
#include "src/engine/gguf.h"

#include <zlib.h>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "src/core/meminfo.h"
#include "veloxquant/error.h"

namespace vq::engine {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxDims = 4;

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }
bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, size_t size) : path_(path), base_(base), size_(size) {}

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw_error(ErrorKind::kData, fmt::format("{}: {} (at byte {}): {}", path_, field, pos_, why));
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  T read(const std::string& field) {
    if (remaining() < sizeof(T)) fail(field, "file ends early");
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& field) {
    const uint64_t len = read<uint64_t>(field + " length");
    if (len > remaining()) fail(field, fmt::format("string of {} bytes runs past the end of the file", len));
    std::string s(reinterpret_cast<const char*>(base_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }

 private:
  const std::string& path_;
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
};

// Smallest encoded size of one value of a type (used to bound counts before allocating).
uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::kFloat64); }

// Reads one scalar of type t (not an array) widened into the array's vectors.
void read_scalar_into(Cursor& c, GgufType t, const std::string& field, GgufArray* a) {
  switch (t) {
    case GgufType::kUint8: a->ints.push_back(c.read<uint8_t>(field)); break;
    case GgufType::kInt8: a->ints.push_back(c.read<int8_t>(field)); break;
    case GgufType::kUint16: a->ints.push_back(c.read<uint16_t>(field)); break;
    case GgufType::kInt16: a->ints.push_back(c.read<int16_t>(field)); break;
    case GgufType::kUint32: a->ints.push_back(c.read<uint32_t>(field)); break;
    case GgufType::kInt32: a->ints.push_back(c.read<int32_t>(field)); break;
    case GgufType::kInt64: a->ints.push_back(c.read<int64_t>(field)); break;
    case GgufType::kUint64: a->u64.push_back(c.read<uint64_t>(field)); break;
    case GgufType::kFloat32: a->floats.push_back(c.read<float>(field)); break;
    case GgufType::kFloat64: a->floats.push_back(c.read<double>(field)); break;
    case GgufType::kBool: {
      const uint8_t b = c.read<uint8_t>(field);
      if (b > 1) c.fail(field, fmt::format("bool value {} is neither 0 nor 1", b));
      a->ints.push_back(b);
      break;
    }
    case GgufType::kString: a->strings.push_back(c.read_string(field)); break;
    case GgufType::kArray: c.fail(field, "nested arrays are not supported");
  }
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& field) {
  GgufValue v;
  v.type = t;
  if (t == GgufType::kArray) {
    GgufArray a;
    const uint32_t et = c.read<uint32_t>(field + " element type");
    if (!valid_type(et)) c.fail(field, fmt::format("unknown array element type {}", et));
    a.type = GgufType(et);
    a.count = c.read<uint64_t>(field + " element count");
    uint64_t need = 0;
    if (mul_overflows(a.count, min_value_bytes(a.type), &need) || need > c.remaining()) {
      c.fail(field, fmt::format("array of {} elements cannot fit in the {} bytes left", a.count, c.remaining()));
    }
    for (uint64_t i = 0; i < a.count; ++i) read_scalar_into(c, a.type, field, &a);
    v.v = std::move(a);
    return v;
  }
  GgufArray one;
  read_scalar_into(c, t, field, &one);
  switch (t) {
    case GgufType::kUint64: v.v = one.u64[0]; break;
    case GgufType::kFloat32: case GgufType::kFloat64: v.v = one.floats[0]; break;
    case GgufType::kBool: v.v = one.ints[0] != 0; break;
    case GgufType::kString: v.v = std::move(one.strings[0]); break;
    default: v.v = one.ints[0]; break;
  }
  return v;
}

const GgmlTypeInfo kTypes[] = {
    {"F32", 1, 4},       {"F16", 1, 2},       {"Q4_0", 32, 18},    {"Q4_1", 32, 20},
    {nullptr, 0, 0},     {nullptr, 0, 0},     {"Q5_0", 32, 22},    {"Q5_1", 32, 24},
    {"Q8_0", 32, 34},    {"Q8_1", 32, 36},    {"Q2_K", 256, 84},   {"Q3_K", 256, 110},
    {"Q4_K", 256, 144},  {"Q5_K", 256, 176},  {"Q6_K", 256, 210},  {"Q8_K", 256, 292},
};
const GgmlTypeInfo kBF16Info = {"BF16", 1, 2};

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  return valid_type(uint32_t(t)) ? names[uint32_t(t)] : "?";
}

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  if (type == uint32_t(GgmlType::kBF16)) return &kBF16Info;
  if (type < sizeof(kTypes) / sizeof(kTypes[0]) && kTypes[type].name) return &kTypes[type];
  return nullptr;
}

namespace {

// The file's bytes in private memory: an anonymous mapping of its own, aligned to 2 MiB and
// marked for transparent huge pages (fewer TLB misses while decode streams the weights; figures in
// performance.md, "Where the weights live"), filled by reads and then made read-only.
constexpr size_t kHugePage = size_t(2) << 20;

const uint8_t* read_whole_file(int fd, size_t size, const std::string& path, void** map, size_t* map_len) {
  const size_t len = size + kHugePage;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw_error(ErrorKind::kUsage, fmt::format("{}: cannot allocate {} bytes to read it into: {}", path, size,
                                               std::strerror(errno)));
  }
  auto* bytes = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1));
  madvise(bytes, size, MADV_HUGEPAGE);  // advice only: without it the pages are small
  for (size_t done = 0; done < size;) {
    const ssize_t got = pread(fd, bytes + done, size - done, off_t(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const std::string why = got < 0 ? std::strerror(errno) : "the file ended early (changed while reading?)";
      munmap(p, len);
      throw_error(ErrorKind::kUsage, fmt::format("{}: cannot read: {}", path, why));
    }
    done += size_t(got);
  }
  mprotect(p, len, PROT_READ);
  *map = p;
  *map_len = len;
  return bytes;
}

}  // namespace

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path, GgufLoad how) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) throw_error(ErrorKind::kUsage, fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st;
  if (fstat(f->fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    throw_error(ErrorKind::kUsage, fmt::format("{}: not a regular file", path));
  }
  f->size_ = size_t(st.st_size);
  // A file larger than the memory the system can give is mapped anyway (and pages in from disk
  // as it is used) rather than read until the system runs out.
  if (how == GgufLoad::kRead) {
    const size_t available = mem_available_bytes();
    if (available != 0 && f->size_ > available) how = GgufLoad::kMap;
  }
  if (f->size_ > 0 && how == GgufLoad::kRead) {
    f->base_ = read_whole_file(f->fd_, f->size_, path, &f->map_, &f->map_len_);
  } else if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, f->fd_, 0);
    if (p == MAP_FAILED) throw_error(ErrorKind::kData, fmt::format("{}: cannot map: {}", path, std::strerror(errno)));
    f->base_ = static_cast<const uint8_t*>(p);
    f->map_ = p;
    f->map_len_ = f->size_;
  }
  f->parse();
  return f;
}

std::unique_ptr<GgufFile> GgufFile::from_memory(std::vector<uint8_t> bytes, const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->owned_ = std::move(bytes);
  f->size_ = f->owned_.size();
  f->base_ = f->size_ ? f->owned_.data() : nullptr;
  f->parse();
  return f;
}

GgufFile::~GgufFile() {
  if (map_) munmap(map_, map_len_);
  if (fd_ >= 0) ::close(fd_);
}

void GgufFile::parse() {
  Cursor c(path_, base_, size_);
  if (c.read<uint32_t>("magic") != kMagic) c.fail("magic", "not a GGUF file (expected \"GGUF\")");
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) c.fail("version", fmt::format("unsupported GGUF version {} (2 and 3 are read)", version_));
  const uint64_t n_tensors = c.read<uint64_t>("tensor_count");
  const uint64_t n_kv = c.read<uint64_t>("metadata_kv_count");
  if (n_kv > c.remaining() / 13) c.fail("metadata_kv_count", fmt::format("{} entries cannot fit in the file", n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string(fmt::format("metadata key #{}", i));
    const uint32_t t = c.read<uint32_t>(fmt::format("type of '{}'", key));
    if (!valid_type(t)) c.fail(fmt::format("type of '{}'", key), fmt::format("unknown value type {}", t));
    GgufValue v = read_value(c, GgufType(t), fmt::format("value of '{}'", key));
    if (!kv_index_.emplace(key, kv_.size()).second) c.fail(fmt::format("metadata key '{}'", key), "appears twice");
    kv_.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::kUint32) c.fail("general.alignment", "must be a u32");
    const int64_t al = std::get<int64_t>(a->v);
    if (al <= 0 || (al & (al - 1)) != 0) c.fail("general.alignment", fmt::format("{} is not a power of two", al));
    alignment_ = uint64_t(al);
  }
  if (n_tensors > c.remaining() / 32) c.fail("tensor_count", fmt::format("{} tensors cannot fit in the file", n_tensors));
  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.read_string(fmt::format("tensor #{} name", i));
    const std::string field = fmt::format("tensor '{}'", t.name);
    const uint32_t n_dims = c.read<uint32_t>(field + " n_dims");
    if (n_dims == 0 || n_dims > kMaxDims) c.fail(field, fmt::format("{} dimensions (1..{} allowed)", n_dims, kMaxDims));
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>(field + " shape");
      if (ne == 0 || ne > (uint64_t(1) << 40)) c.fail(field, fmt::format("dimension {} has size {}", d, ne));
      if (mul_overflows(t.n_elements, ne, &t.n_elements)) c.fail(field, "element count overflows");
      t.shape.push_back(ne);
    }
    t.type = c.read<uint32_t>(field + " type");
    const GgmlTypeInfo* info = ggml_type_info(t.type);
    if (!info) c.fail(field, fmt::format("unknown or unsupported ggml type {}", t.type));
    if (t.shape[0] % uint64_t(info->block_elems) != 0) {
      c.fail(field, fmt::format("row of {} elements is not a whole number of {} blocks of {}", t.shape[0], info->name, info->block_elems));
    }
    if (mul_overflows(t.n_elements / uint64_t(info->block_elems), uint64_t(info->block_bytes), &t.n_bytes)) {
      c.fail(field, "byte size overflows");
    }
    t.offset = c.read<uint64_t>(field + " offset");
    if (t.offset % alignment_ != 0) c.fail(field, fmt::format("offset {} is not a multiple of the alignment {}", t.offset, alignment_));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) c.fail(field, "name appears twice");
    tensors_.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment.
  const uint64_t pos = c.pos();
  data_offset_ = (pos + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > size_ && !tensors_.empty()) c.fail("data section", "starts past the end of the file");
  std::vector<const GgufTensor*> by_offset;
  for (auto& t : tensors_) {
    uint64_t begin = 0, end = 0;
    if (add_overflows(data_offset_, t.offset, &begin) || add_overflows(begin, t.n_bytes, &end) || end > size_) {
      c.fail(fmt::format("tensor '{}'", t.name),
             fmt::format("data [{}, +{}) lies past the end of the {}-byte file", t.offset, t.n_bytes, size_));
    }
    t.data = base_ + begin;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i - 1]->offset + by_offset[i - 1]->n_bytes > by_offset[i]->offset) {
      c.fail(fmt::format("tensor '{}'", by_offset[i]->name), fmt::format("data overlaps tensor '{}'", by_offset[i - 1]->name));
    }
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {
[[noreturn]] void bad_key(const std::string& path, const std::string& key, const char* why) {
  throw_error(ErrorKind::kData, fmt::format("{}: metadata '{}': {}", path, key, why));
}
}  // namespace

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) bad_key(path_, key, "missing");
  if (const auto* i = std::get_if<int64_t>(&v->v)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v->v)) {
    if (*u > uint64_t(INT64_MAX)) bad_key(path_, key, "value out of range");
    return int64_t(*u);
  }
  bad_key(path_, key, "is not an integer");
}
int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const { return has(key) ? get_int(key) : fallback; }

double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) bad_key(path_, key, "missing");
  if (const auto* d = std::get_if<double>(&v->v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v->v)) return double(*i);
  bad_key(path_, key, "is not a number");
}
double GgufFile::get_float(const std::string& key, double fallback) const { return has(key) ? get_float(key) : fallback; }

bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  const GgufValue* v = find(key);
  if (!v) return fallback;
  if (const auto* b = std::get_if<bool>(&v->v)) return *b;
  bad_key(path_, key, "is not a bool");
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) bad_key(path_, key, "missing");
  if (const auto* s = std::get_if<std::string>(&v->v)) return *s;
  bad_key(path_, key, "is not a string");
}
std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

const GgufArray& GgufFile::get_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) bad_key(path_, key, "missing");
  if (const auto* a = std::get_if<GgufArray>(&v->v)) return *a;
  bad_key(path_, key, "is not an array");
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const GgufTensor* t = find_tensor(name);
  if (!t) throw_error(ErrorKind::kData, fmt::format("{}: tensor '{}' is missing", path_, name));
  return *t;
}

uint32_t GgufFile::content_crc32() const {
  if (!crc_) crc_ = uint32_t(crc32_z(crc32_z(0L, Z_NULL, 0), base_, size_));
  return *crc_;
}

}  // namespace vq::engine
