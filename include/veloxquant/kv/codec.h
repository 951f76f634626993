// The codec contract: how a method stores a block of keys or values as packed bytes, and how
// attention reads those bytes directly (scores for keys, weighted sums for values).
//
// A block is `block_tokens()` consecutive tokens of one KV head, stored in `block_bytes()` bytes:
// packed codes plus the per-group parameters the method needs, and nothing else. Blocks of one
// head lie back to back in memory, so a run of blocks can be scored in one call: token i of a
// run lives in block i / block_tokens() at slot i % block_tokens().
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace vq::kv {

// Scratch memory for one thread's calls into codecs and attention kernels. Buffers grow on demand
// and are kept across calls, layers and steps (a decode step would otherwise allocate and free
// them for every call, and big ones are mapped and faulted in afresh), so their contents are
// unspecified at each call: a user writes what it reads. Whoever calls a codec owns the
// workspace and never shares one between threads at once (attention gives each worker its own).
class Workspace {
 public:
  // Each user of the workspace has its own slots, so that a codec's buffers survive a shared
  // kernel it calls: kCodec* for the codec itself, the others for the helpers named.
  enum Slot : int {
    kCodec0, kCodec1, kCodec2, kCodec3, kCodec4, kCodec5, kCodec6,
    kDecodeTile,                 // decode_tiles (kernels/decode_tiles.h)
    kLutTable, kLutLow,          // lut_u8_prepare (kernels/codebook_kernels.h)
    kAttendScores, kAttendRescale,  // LayerCache::attend, per work item
    kAttendQueries, kAttendStates,  // LayerCache::attend, once per step (the caller's workspace)
    kSlots
  };

  // At least n elements of type T in `slot`, 64-byte aligned; contents unspecified.
  template <typename T>
  T* get(Slot slot, size_t n) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= kAlign);
    return static_cast<T*>(bytes(slot, n * sizeof(T)));
  }
  // As get, but first frees the slot's buffer where it is larger than both keep_bytes and twice
  // the need: a long prefill's buffer serves the calls of a similar size after it and is not
  // kept for a lifetime of short ones.
  template <typename T>
  T* get_fitted(Slot slot, size_t n, size_t keep_bytes) {
    trim(slot, std::max(keep_bytes, 2 * n * sizeof(T)));
    return get<T>(slot, n);
  }

 private:
  static constexpr size_t kAlign = 64;
  void* bytes(Slot slot, size_t n);
  void trim(Slot slot, size_t max_bytes);  // frees the slot's buffer where it is larger
  struct Free {
    void operator()(void* p) const;
  };
  struct Buffer {
    std::unique_ptr<void, Free> data;
    size_t size = 0;
  };
  std::array<Buffer, kSlots> buffers_;
};

// How the model rotates keys by position (rotary embedding), for codecs that store keys as they
// were before the rotation and apply it while scoring. NEOX pairs channels (i, i + d/2), NORM
// pairs (2i, 2i + 1); pair i turns by pos * freq_scale * base^(-2i/d) / freq_factors[i].
struct RopeSpec {
  enum class Style : uint8_t { kNone, kNeox, kNorm };
  Style style = Style::kNone;
  float base = 10000.0f;
  float freq_scale = 1.0f;
  // Per rotary pair, the divisor of its frequency (Llama 3's rope_freqs); empty: all 1.
  std::vector<float> freq_factors;
};

struct LayerCalibration;

// What a codec is built for: the shape of one layer's heads, the layer's rotary embedding, and
// the layer's calibration for methods that learn from data (null when the method was given none).
// Randomness (rotations, sketches) comes from the method's own `seed` parameter and the layer
// index, so the same spec builds the same codecs. kv_head: the KV head the codec serves, for a method whose
// codecs differ per head (MethodImpl::per_head_codecs); 0 for the others, whose one codec
// serves every head of the layer.
struct CodecContext {
  CodecContext() = default;
  CodecContext(int dim, int layer_index, RopeSpec rope_spec = {}, const LayerCalibration* layer_calib = nullptr)
      : head_dim(dim), layer(layer_index), rope(std::move(rope_spec)), calib(layer_calib) {}
  int head_dim = 0;
  int layer = 0;
  RopeSpec rope;
  const LayerCalibration* calib = nullptr;
  int kv_head = 0;
};

class KeyCodec {
 public:
  virtual ~KeyCodec() = default;

  virtual int head_dim() const = 0;
  virtual int block_tokens() const = 0;
  virtual size_t block_bytes() const = 0;
  // Bytes of fixed state the codec keeps for the layer (rotation signs, codebooks), counted
  // in the cache's memory.
  virtual size_t param_bytes() const { return 0; }

  // keys: [block_tokens][head_dim] at absolute positions pos0, pos0+1, ...
  virtual void encode(const float* keys, int64_t pos0, uint8_t* block) const = 0;
  // A codec whose tokens are quantized each on its own (per-token scales) may write one token
  // into slot `slot` of a block whose other slots are unwritten or zero, so a token is
  // compressed as soon as it leaves the window instead of waiting in fp16 for its block to fill.
  virtual bool encodes_single_tokens() const { return block_tokens() == 1; }
  virtual void encode_token(const float* key, int64_t pos, int slot, uint8_t* block) const {
    encode(key, pos - slot, block);  // block_tokens() == 1
  }
  // n tokens (head_dim floats each) at positions pos0.. into slots slot.. of one block
  // (slot + n <= block_tokens()), for a codec that encodes single tokens: the bytes encode_token
  // writes for each in turn. A codec whose per-token work streams a matrix (a sketch, a basis)
  // serves several tokens per pass over it; the cache hands a prompt's tokens over in such runs.
  virtual void encode_tokens(const float* keys, int64_t pos0, int slot, int n, uint8_t* block) const {
    for (int i = 0; i < n; ++i) encode_token(keys + size_t(i) * size_t(head_dim()), pos0 + i, slot + i, block);
  }
  // Plain reference decode of a whole block to [block_tokens][head_dim] (tests, debugging).
  virtual void decode(const uint8_t* block, int64_t pos0, float* keys) const = 0;

  // Work done once per query per step (a rotation, a sketch, a lookup table): the state has
  // query_state_floats() floats and is what `scores` reads.
  virtual size_t query_state_floats() const = 0;
  virtual void prepare_query(const float* q, float* state, Workspace& ws) const = 0;
  // prepare_query for n rows (q_stride floats apart) into states (state_stride apart), each row's
  // state as prepare_query writes it. Attention prepares a block of rows at once, so a codec whose
  // preparation streams a matrix per row (a basis, a sketch) can serve several rows per pass.
  virtual void prepare_queries(const float* q, size_t q_stride, int n, float* states, size_t state_stride,
                               Workspace& ws) const {
    for (int r = 0; r < n; ++r) prepare_query(q + size_t(r) * q_stride, states + size_t(r) * state_stride, ws);
  }
  // The three calls with a workspace of their own (one-off use and tests; attention passes each
  // worker's workspace, so its steps allocate nothing).
  void prepare_query(const float* q, float* state) const {
    Workspace ws;
    prepare_query(q, state, ws);
  }
  void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0, int64_t i1, float* out,
              size_t out_stride) const {
    Workspace ws;
    scores(states, n_q, blocks, pos0, i0, i1, out, out_stride, ws);
  }

  // For n_q prepared queries (states[r * query_state_floats()]), writes q.k of tokens [i0, i1)
  // of the run starting at `blocks` (whose token 0 has position pos0) to
  // out[r * out_stride + (i - i0)], computed from the packed codes.
  virtual void scores(const float* states, int n_q, const uint8_t* blocks, int64_t pos0,
                      int64_t i0, int64_t i1, float* out, size_t out_stride, Workspace& ws) const = 0;
};

class ValueCodec {
 public:
  virtual ~ValueCodec() = default;

  virtual int head_dim() const = 0;
  virtual int block_tokens() const = 0;
  virtual size_t block_bytes() const = 0;
  virtual size_t param_bytes() const { return 0; }

  virtual void encode(const float* values, int64_t pos0, uint8_t* block) const = 0;
  // As for keys.
  virtual bool encodes_single_tokens() const { return block_tokens() == 1; }
  virtual void encode_token(const float* value, int64_t pos, int slot, uint8_t* block) const {
    encode(value, pos - slot, block);  // block_tokens() == 1
  }
  virtual void encode_tokens(const float* values, int64_t pos0, int slot, int n, uint8_t* block) const {
    for (int i = 0; i < n; ++i) encode_token(values + size_t(i) * size_t(head_dim()), pos0 + i, slot + i, block);
  }
  virtual void decode(const uint8_t* block, int64_t pos0, float* values) const = 0;

  // Attention keeps, per query, an accumulator of accum_floats() floats in the codec's own
  // space (for a rotated codec the rotated space, plus whatever side sums the codec keeps) and
  // maps it back to head_dim values once at the end with `finalize`.
  virtual size_t accum_floats() const = 0;
  // acc[r * accum_floats() + ...] += sum over i in [i0, i1) of w[r * w_stride + (i - i0)] * v_i.
  virtual void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks,
                          int64_t pos0, int64_t i0, int64_t i1, float* acc, Workspace& ws) const = 0;
  // With a workspace of its own, as for keys.
  void accumulate(const float* w, size_t w_stride, int n_q, const uint8_t* blocks, int64_t pos0, int64_t i0,
                  int64_t i1, float* acc) const {
    Workspace ws;
    accumulate(w, w_stride, n_q, blocks, pos0, i0, i1, acc, ws);
  }
  // out[r * head_dim + j] = the head_dim values the accumulator of query r stands for.
  virtual void finalize(const float* acc, int n_q, float* out) const = 0;
  // Tokens per `accumulate` call the attention loop should give in decode (it gives at least
  // 256): a codec whose every call pays a fixed cost (VecInfer multiplies its tables of
  // centroid sums through the codebook) asks for longer runs. 0: no preference.
  virtual int64_t preferred_run_tokens() const { return 0; }
};

}  // namespace vq::kv
