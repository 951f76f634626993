// What a method learns offline from a model's activations on calibration text, bound to the
// method spec and to the model it was made for, and saved as a checked file (magic, version,
// CRC-32): `veloxquant calibrate` writes it, `--calib FILE` reads it. Besides learned datatypes it
// can hold a bit allocation and the sensitivity probe it came from (RateQuant).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "veloxquant/kv/codec.h"

namespace vq::kv {

// A KV head's spectral basis (SpectralQuant): the mean of its vectors and the eigenvectors of
// their covariance, strongest first, with the standard deviation along each.
struct SpectralBasis {
  std::vector<float> mean;   // [head_dim]
  std::vector<float> sigma;  // [head_dim], descending, positive
  std::vector<float> basis;  // [head_dim][head_dim]: row i is the i-th unit eigenvector
};

struct LayerCalibration {
  int head_dim = 0;
  // Keys as they were before RoPE, per channel (pooled over the layer's KV heads): the range
  // that holds the inliers. Values outside it are outliers.
  std::vector<float> key_lo, key_hi;
  // Non-uniform datatypes: the levels (ascending) of normalized keys and values.
  std::vector<float> key_levels, value_levels;
  // Vector quantizers: per key channel a smoothing divisor (positive), and codebooks of
  // centroids per sub-vector, laid out [sub-vector][centroid][coordinate].
  std::vector<float> key_smooth;
  std::vector<float> key_codebook, value_codebook;
  // RateQuant: the bit widths allocated to this layer's keys and values (0: not a RateQuant
  // calibration), and the probe's mean KL against fp16 (nats per scored token) when only this
  // layer's keys, or only its values, were compressed at each width of Calibration::probe_bits.
  int key_bits = 0, value_bits = 0;
  std::vector<float> key_probe_kl, value_probe_kl;
  // RateQuant allocated per KV head (`unit=head`): each head's key and value width (key_bits and
  // value_bits are then 0, and each probe row above holds [head][width]: the KL with only that
  // head's keys, or values, compressed), and for a base that learns its datatype per width
  // (KVQuant) the levels learned at each head's widths. Empty for a per-layer allocation.
  std::vector<int> key_head_bits, value_head_bits;
  std::vector<std::vector<float>> key_head_levels, value_head_levels;
  // SpectralQuant: per KV head the basis of its keys (as the cache receives them, after RoPE)
  // and of its values, and per side the layer's number of signal coordinates (the effective
  // dimension of its spectrum; 0: not a SpectralQuant calibration).
  std::vector<SpectralBasis> key_spectral, value_spectral;
  int key_rank = 0, value_rank = 0;
  // CommVQ: per KV head the residual codebook of its keys (before RoPE) and of its values,
  // [stage][X|Y][64][head_dim/2] (src/kv/calib/commvq_codebook.h); empty when not CommVQ.
  std::vector<std::vector<float>> key_commvq, value_commvq;
};

// Which model a calibration belongs to: a calibration is refused for any other.
struct ModelIdentity {
  std::string name;
  std::string arch;
  uint32_t crc32 = 0;  // of the model file's contents
  int n_layer = 0, n_kv_heads = 0, head_dim = 0;
  bool operator==(const ModelIdentity&) const = default;
  std::string describe() const;
};

struct Calibration {
  std::string spec;  // canonical spec of the method it was made for
  ModelIdentity model;
  std::string source;  // the text it was computed on
  int64_t tokens = 0;
  std::vector<LayerCalibration> layers;
  // RateQuant: the candidate widths its probe tried, ascending (empty for other methods).
  std::vector<int> probe_bits;
};

// One layer's activations from calibration text, as a method learns from them.
struct LayerSamples {
  int n_kv_heads = 0, head_dim = 0;
  int64_t n_tokens = 0;
  std::vector<float> keys;    // [n_tokens][n_kv_heads][head_dim], before RoPE
  std::vector<float> values;  // [n_tokens][n_kv_heads][head_dim]
  // Each token's position and the layer's rotary embedding, so that a method that stores keys
  // after RoPE (as the cache receives them) can turn the samples forward again.
  std::vector<int64_t> positions;  // [n_tokens]
  RopeSpec rope;
  // Sensitivity without gradients (this engine has no backward pass), what an error costs
  // attention: per key channel, the mean square of the RoPE-aligned queries that meet it (a
  // key error e in channel c moves a score by q_c e); per token and KV head, the sum over the
  // queries that see it of its squared attention weight (a value error e moves the output by
  // a e).
  std::vector<double> key_channel_weight;  // [head_dim]
  std::vector<double> value_token_weight;  // [n_tokens][n_kv_heads]
};

void save_calibration(const std::string& path, const Calibration& c);
// Throws vq::Error: kUsage when the file cannot be opened, kData when it is damaged, of another
// kind or version, or holds values no calibration can have.
Calibration load_calibration(const std::string& path);
// The checked payload of a calibration file, parsed and validated (`what` names it in errors).
Calibration parse_calibration(const std::vector<uint8_t>& payload, const std::string& what);
std::vector<uint8_t> serialize_calibration(const Calibration& c);
// CRC-32 of the serialized calibration: which calibration a saved cache was stored under.
uint32_t calibration_crc32(const Calibration& c);

}  // namespace vq::kv
