// Calibration files: a checked file ("VQCALIB1") whose payload is the spec, the model identity, the
// source text's description, the RateQuant probe widths, and per layer the key ranges, the two
// datatypes, the key smoothing divisors and the two vector codebooks (VecInfer), the RateQuant
// allocation and probe table, the SpectralQuant ranks and per-head bases, and the CommVQ per-head
// codebooks. A RateQuant allocation per KV head adds a section after the layers (each layer's head
// widths and their datatypes); a file with it is version 5, without it version 4, so a per-layer
// calibration keeps the bytes (and the CRC-32 a saved cache records) it had, and a build that
// cannot read per-head widths refuses the file by its version. Older versions (without vector
// quantizers, RateQuant, SpectralQuant or CommVQ) are refused by the version check: such a file is
// made again with `calibrate`.
// Everything read is validated before use: counts against their limits, floats finite, ranges
// ordered, levels ascending.
#include <fmt/format.h>

#include <bit>
#include <cmath>

#include <zlib.h>

#include "src/core/byte_io.h"
#include "src/core/checked_file.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/calibration.h"

namespace vq::kv {

namespace {

constexpr char kMagic[9] = "VQCALIB1";
constexpr uint32_t kVersion = 4, kVersionPerHead = 5;
constexpr int64_t kMaxProbeWidths = 16, kMaxBits = 16;
constexpr float kMaxProbeKl = 1e6f;  // nats per token; a real probe stays far below
constexpr int64_t kMaxLayers = 4096, kMaxHeadDim = 4096, kMaxLevels = 256, kMaxHeads = 4096;
constexpr int64_t kMaxVqCentroids = 256;
constexpr float kMaxLevel = 16.0f;  // levels live near [-1, 1]; Q-Norm may move them a little

void put_floats(ByteWriter& w, const std::vector<float>& v) {
  w.u64(v.size());
  for (float x : v) w.u32(std::bit_cast<uint32_t>(x));
}

std::vector<float> get_floats(ByteReader& r, const char* field, int64_t lo, int64_t hi) {
  const int64_t n = r.i64_in(field, lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  r.raw(v.data(), v.size() * sizeof(float), field);
  for (float x : v) r.check(std::isfinite(x), field, "holds a value that is not finite");
  return v;
}

bool has_head_widths(const Calibration& c) {
  for (const LayerCalibration& l : c.layers) {
    if (!l.key_head_bits.empty() || !l.value_head_bits.empty()) return true;
  }
  return false;
}

// A datatype: empty, or strictly ascending levels near [-1, 1].
std::vector<float> get_levels(ByteReader& r, const char* field) {
  std::vector<float> v = get_floats(r, field, 0, kMaxLevels);
  for (size_t i = 0; i < v.size(); ++i) {
    r.check(std::fabs(v[i]) <= kMaxLevel, field, "a level lies far outside [-1, 1]");
    r.check(i == 0 || v[i - 1] < v[i], field, "not strictly ascending");
  }
  return v;
}

void put_spectral(ByteWriter& w, int rank, const std::vector<SpectralBasis>& heads) {
  w.i64(rank);
  w.u64(heads.size());
  for (const SpectralBasis& b : heads) {
    put_floats(w, b.mean);
    put_floats(w, b.sigma);
    put_floats(w, b.basis);
  }
}

// One side's rank and bases: none (rank 0), or one basis per model KV head, each a mean, positive
// descending deviations and unit rows, all of the layer's head size.
void get_spectral(ByteReader& r, int d, int n_heads, int* rank, std::vector<SpectralBasis>* heads) {
  *rank = int(r.i64_in("spectral rank", 0, d));
  const int64_t n = r.i64_in("spectral heads", 0, kMaxHeads);
  r.check((*rank == 0) == (n == 0) && (n == 0 || n == n_heads), "spectral heads",
          fmt::format("{} bases with rank {} for a model of {} KV heads", n, *rank, n_heads));
  for (int64_t h = 0; h < n; ++h) {
    SpectralBasis b;
    b.mean = get_floats(r, "spectral mean", d, d);
    b.sigma = get_floats(r, "spectral deviations", d, d);
    b.basis = get_floats(r, "spectral basis", int64_t(d) * d, int64_t(d) * d);
    for (size_t i = 0; i < b.sigma.size(); ++i) {
      r.check(b.sigma[i] > 0.0f && b.sigma[i] <= 65504.0f && (i == 0 || b.sigma[i] <= b.sigma[i - 1]),
              "spectral deviations", "not positive, descending and within the fp16 range");
    }
    for (float x : b.mean) r.check(std::fabs(x) <= 65504.0f, "spectral mean", "outside the fp16 range");
    for (int i = 0; i < d; ++i) {
      double nn = 0;
      for (int j = 0; j < d; ++j) nn += double(b.basis[size_t(i) * d + j]) * b.basis[size_t(i) * d + j];
      r.check(std::fabs(nn - 1.0) < 1e-3, "spectral basis", fmt::format("row {} is not a unit vector", i));
    }
    heads->push_back(std::move(b));
  }
}

void put_books(ByteWriter& w, const std::vector<std::vector<float>>& heads) {
  w.u64(heads.size());
  for (const auto& b : heads) put_floats(w, b);
}

// One side's CommVQ codebooks: none, or one per model KV head, each whole stages of
// 2 x 64 x d/2 floats (the same number of stages for every head).
void get_books(ByteReader& r, int d, int n_heads, std::vector<std::vector<float>>* heads) {
  const int64_t n = r.i64_in("commvq heads", 0, kMaxHeads);
  r.check(n == 0 || n == n_heads, "commvq heads", fmt::format("{} codebooks for a model of {} KV heads", n, n_heads));
  const int64_t stage = int64_t(2) * 64 * (d / 2);
  for (int64_t h = 0; h < n; ++h) {
    std::vector<float> b = get_floats(r, "commvq codebook", stage, int64_t(1) << 24);
    r.check(d % 2 == 0 && b.size() % size_t(stage) == 0 && (h == 0 || b.size() == heads->front().size()),
            "commvq codebook", "not whole stages of an even head size, the same for every head");
    for (float x : b) r.check(std::fabs(x) <= 65504.0f, "commvq codebook", "a value outside the fp16 range");
    heads->push_back(std::move(b));
  }
}

}  // namespace

std::string ModelIdentity::describe() const {
  return fmt::format("{} ({}, {} layers, {} KV heads of {}, CRC-32 {:08x})", name, arch, n_layer, n_kv_heads, head_dim,
                     crc32);
}

std::vector<uint8_t> serialize_calibration(const Calibration& c) {
  ByteWriter w;
  w.str(c.spec);
  w.str(c.model.name);
  w.str(c.model.arch);
  w.u32(c.model.crc32);
  w.i64(c.model.n_layer);
  w.i64(c.model.n_kv_heads);
  w.i64(c.model.head_dim);
  w.str(c.source);
  w.i64(c.tokens);
  w.u64(c.probe_bits.size());
  for (int b : c.probe_bits) w.i64(b);
  w.i64(int64_t(c.layers.size()));
  for (const LayerCalibration& l : c.layers) {
    w.i64(l.head_dim);
    put_floats(w, l.key_lo);
    put_floats(w, l.key_hi);
    put_floats(w, l.key_levels);
    put_floats(w, l.value_levels);
    put_floats(w, l.key_smooth);
    put_floats(w, l.key_codebook);
    put_floats(w, l.value_codebook);
    w.i64(l.key_bits);
    w.i64(l.value_bits);
    put_floats(w, l.key_probe_kl);
    put_floats(w, l.value_probe_kl);
    put_spectral(w, l.key_rank, l.key_spectral);
    put_spectral(w, l.value_rank, l.value_spectral);
    put_books(w, l.key_commvq);
    put_books(w, l.value_commvq);
  }
  if (has_head_widths(c)) {
    for (const LayerCalibration& l : c.layers) {
      VQ_CHECK(l.key_head_bits.size() == size_t(c.model.n_kv_heads) && l.value_head_bits.size() == l.key_head_bits.size() &&
                   l.key_head_levels.size() == l.key_head_bits.size() &&
                   l.value_head_levels.size() == l.key_head_bits.size(),
               "calibration: per-head widths and datatypes for every layer and KV head");
      w.i64(int64_t(l.key_head_bits.size()));
      for (size_t h = 0; h < l.key_head_bits.size(); ++h) {
        w.i64(l.key_head_bits[h]);
        w.i64(l.value_head_bits[h]);
        put_floats(w, l.key_head_levels[h]);
        put_floats(w, l.value_head_levels[h]);
      }
    }
  }
  return w.data();
}

Calibration parse_calibration(const std::vector<uint8_t>& payload, const std::string& what) {
  ByteReader r(payload.data(), payload.size(), what);
  Calibration c;
  c.spec = r.str("spec", 1024);
  c.model.name = r.str("model name", 1024);
  c.model.arch = r.str("model architecture", 256);
  c.model.crc32 = r.u32("model CRC-32");
  c.model.n_layer = int(r.i64_in("model layers", 1, kMaxLayers));
  c.model.n_kv_heads = int(r.i64_in("model KV heads", 1, kMaxHeads));
  c.model.head_dim = int(r.i64_in("model head size", 1, kMaxHeadDim));
  c.source = r.str("source", 4096);
  c.tokens = r.i64_in("tokens", 0, int64_t(1) << 40);
  const int64_t n_widths = r.i64_in("probe widths", 0, kMaxProbeWidths);
  for (int64_t i = 0; i < n_widths; ++i) {
    c.probe_bits.push_back(int(r.i64_in("probe width", 1, kMaxBits)));
    r.check(i == 0 || c.probe_bits[size_t(i) - 1] < c.probe_bits[size_t(i)], "probe widths", "not strictly ascending");
  }
  const int64_t n_layers = r.i64_in("layer count", 0, kMaxLayers);
  r.check(n_layers == c.model.n_layer, "layer count", fmt::format("{} layers for a model of {}", n_layers, c.model.n_layer));
  for (int64_t l = 0; l < n_layers; ++l) {
    LayerCalibration lc;
    lc.head_dim = int(r.i64_in("layer head size", 1, kMaxHeadDim));
    r.check(lc.head_dim == c.model.head_dim, "layer head size", "differs from the model's");
    lc.key_lo = get_floats(r, "key ranges (low)", 0, kMaxHeadDim);
    lc.key_hi = get_floats(r, "key ranges (high)", 0, kMaxHeadDim);
    r.check(lc.key_lo.size() == lc.key_hi.size() && (lc.key_lo.empty() || int(lc.key_lo.size()) == lc.head_dim),
            "key ranges", "not one per channel");
    for (size_t j = 0; j < lc.key_lo.size(); ++j) {
      r.check(lc.key_lo[j] <= lc.key_hi[j] && std::fabs(lc.key_lo[j]) <= 65504.0f && std::fabs(lc.key_hi[j]) <= 65504.0f,
              "key ranges", fmt::format("channel {}: [{}, {}] is not an fp16 range", j, lc.key_lo[j], lc.key_hi[j]));
    }
    lc.key_levels = get_levels(r, "levels");
    lc.value_levels = get_levels(r, "levels");
    lc.key_smooth = get_floats(r, "key smoothing", 0, kMaxHeadDim);
    r.check(lc.key_smooth.empty() || int(lc.key_smooth.size()) == lc.head_dim, "key smoothing", "not one per channel");
    for (float x : lc.key_smooth) {
      r.check(x > 0.0f && x <= 65504.0f, "key smoothing", fmt::format("divisor {} is not in (0, 65504]", x));
    }
    for (auto* book : {&lc.key_codebook, &lc.value_codebook}) {
      // [sub-vector][centroid][coordinate]: head_dim floats per centroid index, at most 256.
      *book = get_floats(r, "codebook", 0, kMaxVqCentroids * kMaxHeadDim);
      r.check(book->size() % size_t(lc.head_dim) == 0, "codebook", "not a whole number of centroids per sub-vector");
      for (float x : *book) r.check(std::fabs(x) <= 65504.0f, "codebook", "a centroid lies outside the fp16 range");
    }
    lc.key_bits = int(r.i64_in("key width", 0, kMaxBits));
    lc.value_bits = int(r.i64_in("value width", 0, kMaxBits));
    for (auto* kl : {&lc.key_probe_kl, &lc.value_probe_kl}) {
      // One KL per width, or per head and width (checked against the allocation below).
      *kl = get_floats(r, "probe KL", 0, kMaxProbeWidths * kMaxHeads);
      for (float x : *kl) r.check(x >= 0.0f && x <= kMaxProbeKl, "probe KL", "a KL below 0 or absurdly large");
    }
    get_spectral(r, lc.head_dim, c.model.n_kv_heads, &lc.key_rank, &lc.key_spectral);
    get_spectral(r, lc.head_dim, c.model.n_kv_heads, &lc.value_rank, &lc.value_spectral);
    get_books(r, lc.head_dim, c.model.n_kv_heads, &lc.key_commvq);
    get_books(r, lc.head_dim, c.model.n_kv_heads, &lc.value_commvq);
    c.layers.push_back(std::move(lc));
  }
  // The per-head allocation, when the payload goes on.
  const bool per_head = r.remaining() > 0;
  for (LayerCalibration& lc : c.layers) {
    if (!per_head) break;
    const int64_t n = r.i64_in("head widths", c.model.n_kv_heads, c.model.n_kv_heads);
    for (int64_t h = 0; h < n; ++h) {
      lc.key_head_bits.push_back(int(r.i64_in("head key width", 1, kMaxBits)));
      lc.value_head_bits.push_back(int(r.i64_in("head value width", 1, kMaxBits)));
      lc.key_head_levels.push_back(get_levels(r, "head levels"));
      lc.value_head_levels.push_back(get_levels(r, "head levels"));
    }
  }
  r.check(r.remaining() == 0, "end", fmt::format("{} unexpected trailing bytes", r.remaining()));
  // A probe comes with its allocation, per layer (one KL per width) or per head (per head and width).
  const size_t W = c.probe_bits.size(), H = size_t(c.model.n_kv_heads);
  for (const LayerCalibration& lc : c.layers) {
    const bool layer_widths = lc.key_bits != 0 || lc.value_bits != 0;
    r.check(!(per_head && layer_widths) && (W == 0) == !(per_head || layer_widths) &&
                (per_head || (lc.key_bits != 0) == (lc.value_bits != 0)),
            "widths", "an allocation without its probe, or a probe without its allocation");
    const size_t row = per_head ? H * W : W;
    r.check(lc.key_probe_kl.size() == row && lc.value_probe_kl.size() == row, "probe KL",
            per_head ? "not one per head and probe width" : "not one per probe width");
    for (size_t h = 0; h < lc.key_head_bits.size(); ++h) {
      for (const int b : {lc.key_head_bits[h], lc.value_head_bits[h]}) {
        r.check(b >= c.probe_bits.front() && b <= c.probe_bits.back(), "head widths", "outside the probe's widths");
      }
      for (const auto& [levels, b] : {std::pair{&lc.key_head_levels[h], lc.key_head_bits[h]},
                                      std::pair{&lc.value_head_levels[h], lc.value_head_bits[h]}}) {
        r.check(levels->empty() || levels->size() == size_t(1) << b, "head levels", "not 2^width levels");
      }
    }
  }
  return c;
}

uint32_t calibration_crc32(const Calibration& c) {
  const std::vector<uint8_t> bytes = serialize_calibration(c);
  return uint32_t(crc32(crc32(0L, Z_NULL, 0), bytes.data(), uInt(bytes.size())));
}

void save_calibration(const std::string& path, const Calibration& c) {
  write_checked_file(path, kMagic, has_head_widths(c) ? kVersionPerHead : kVersion, serialize_calibration(c));
}

Calibration load_calibration(const std::string& path) {
  uint32_t version = 0;
  Calibration c = parse_calibration(read_checked_file(path, kMagic, kVersion, kVersionPerHead, &version), path);
  VQ_CHECK_DATA(has_head_widths(c) == (version == kVersionPerHead),
                fmt::format("{}: format version {} with{} per-head widths", path, version, has_head_widths(c) ? "" : "out"));
  return c;
}

}  // namespace vq::kv
