// The KV cache of one layer (and a container for all layers), compressed by a Method.
//
// Per KV head the cache holds, in position order:
//   1. sink tokens in fp16 (the method's sink_tokens(), kept forever),
//   2. compressed blocks: packed codes and per-group parameters only,
//   3. a residual window of the newest tokens in fp16, which flushes its oldest
//      block_tokens() tokens into a block whenever it holds keep + block_tokens(); a codec
//      that encodes tokens on their own (encodes_single_tokens()) takes them one at a time
//      into the slots of the current block, so the window holds just keep + 1.
// Keys and values are separate streams with their own codec, block size and window.
// Positions are contiguous from 0. A layer with a sliding window drops whole pages of blocks
// that no future query can see.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "veloxquant/kv/codec.h"
#include "veloxquant/kv/method.h"

namespace vq::kv {

struct LayerConfig {
  LayerConfig() = default;
  LayerConfig(int heads, int dim, int layer, int window = 0, RopeSpec rope_spec = {})
      : n_kv_heads(heads), head_dim(dim), layer_index(layer), sliding_window(window), rope(rope_spec) {}
  int n_kv_heads = 0;
  int head_dim = 0;
  int layer_index = 0;
  // Attend only to the last `sliding_window` positions (0: the whole context).
  int sliding_window = 0;
  // The rotary embedding the model applied to the keys it appends (for pre-RoPE codecs).
  RopeSpec rope;
  // Scores s become c * tanh(s / c) before the softmax (Gemma 2's attention soft-capping); 0: off.
  float logit_softcap = 0.0f;
};

// Bytes actually allocated, by role.
struct MemoryUsage {
  size_t block_bytes = 0;   // compressed pages (capacity, including any unfilled tail)
  size_t window_bytes = 0;  // fp16 residual windows (capacity)
  size_t sink_bytes = 0;    // fp16 sink tokens (capacity)
  size_t param_bytes = 0;   // codec state (rotations, codebooks)
  // Elements (token x head x channel) held in compressed blocks, for keys and for values, and
  // all elements retained (keys plus values, in any form).
  int64_t key_elements_compressed = 0;
  int64_t value_elements_compressed = 0;
  int64_t elements_retained = 0;
  size_t total() const { return block_bytes + window_bytes + sink_bytes + param_bytes; }
  MemoryUsage& operator+=(const MemoryUsage& o);
};

class TokenStream;

// The scratch of LayerCache::attend: the step's query buffers and one Workspace per worker
// thread, kept by whoever attends across layers and steps (a model session keeps one) so that
// decode steps allocate nothing. One call at a time.
class AttendWorkspace {
 public:
  AttendWorkspace();
  ~AttendWorkspace();
  AttendWorkspace(AttendWorkspace&&) noexcept;
  AttendWorkspace& operator=(AttendWorkspace&&) noexcept;
  // The calling thread's buffers, shared by the workers within one call.
  Workspace& step() { return step_; }
  // Worker `thread`'s own buffers (thread < the count last reserved).
  Workspace& worker(int thread) { return *workers_[size_t(thread)]; }
  void reserve(int n_threads);

 private:
  Workspace step_;
  std::vector<std::unique_ptr<Workspace>> workers_;
};

// Sees what a model hands its cache, layer by layer, as floats: the keys and values appended and
// the queries that attend. For capturing real activations (fidelity, calibration); set on a
// KvCache with set_observer. Layouts as in LayerCache::append and LayerCache::attend.
class CacheObserver {
 public:
  virtual ~CacheObserver() = default;
  virtual void on_append(int layer, const float* k, const float* v, int n, int64_t pos0) = 0;
  virtual void on_attend(int layer, const float* q, int n_q, int n_q_heads, const int64_t* q_pos, float scale) = 0;
};

class LayerCache {
 public:
  LayerCache(const Method& method, const LayerConfig& config);
  ~LayerCache();
  LayerCache(LayerCache&&) noexcept;
  LayerCache& operator=(LayerCache&&) noexcept;

  const LayerConfig& config() const { return config_; }
  // The codecs of KV head `head` (one pair serves every head unless the method builds codecs
  // per head).
  const KeyCodec& key_codec(int head = 0) const { return *key_codecs_[key_codecs_.size() == 1 ? 0 : size_t(head)]; }
  const ValueCodec& value_codec(int head = 0) const {
    return *value_codecs_[value_codecs_.size() == 1 ? 0 : size_t(head)];
  }

  // Appends n tokens at positions n_tokens() .. n_tokens()+n-1.
  // k and v are [n][n_kv_heads][head_dim].
  void append(const float* k, const float* v, int n);
  int64_t n_tokens() const { return n_tokens_; }
  void clear();
  MemoryUsage memory() const;

  // Attention of n_q query tokens over the cache as stored. q and out are
  // [n_q][n_q_heads][head_dim]; query token i sits at position q_pos[i] and sees positions
  // p <= q_pos[i] (and p > q_pos[i] - sliding_window when the layer has one). scores are
  // scale * q.k. Query head h reads KV head h / (n_q_heads / n_kv_heads). The scratch comes
  // from `ws`, which the caller keeps across layers and steps; the overload without one
  // allocates its own for the call.
  void attend(const float* q, int n_q, int n_q_heads, const int64_t* q_pos, float scale,
              float* out, AttendWorkspace& ws) const;
  void attend(const float* q, int n_q, int n_q_heads, const int64_t* q_pos, float scale,
              float* out) const;

  // The same attention computed the plain way: every block decoded to floats, then an ordinary
  // softmax in double precision. The oracle the fused path is tested against.
  void attend_reference(const float* q, int n_q, int n_q_heads, const int64_t* q_pos,
                        float scale, float* out) const;

  // What the cache holds for one KV head, decoded: keys and values [n][head_dim] and their
  // positions.
  void decode_head(int head, std::vector<float>* keys, std::vector<float>* values,
                   std::vector<int64_t>* positions) const;

  void set_observer(CacheObserver* o) { observer_ = o; }

 private:
  friend struct CacheIo;  // saving and loading the streams (src/kv/cache_io.h)
  LayerConfig config_;
  std::vector<std::unique_ptr<KeyCodec>> key_codecs_;
  std::vector<std::unique_ptr<ValueCodec>> value_codecs_;
  std::vector<std::unique_ptr<TokenStream>> keys_, values_;
  int64_t n_tokens_ = 0;
  CacheObserver* observer_ = nullptr;
};

// Bytes a cache of these layers would hold after n_tokens tokens appended at most max_batch at a
// time (pages, windows, sinks and codec state, rounded up as allocation rounds): checked against a
// memory budget before allocating. A sliding-window layer keeps its window, the batch being
// appended and at most two partly visible pages.
size_t estimate_kv_bytes(const Method& method, const std::vector<LayerConfig>& layers, int64_t n_tokens,
                         int64_t max_batch = 512);

// All layers of a model.
class KvCache {
 public:
  KvCache(const Method& method, const std::vector<LayerConfig>& layers);
  size_t n_layers() const { return layers_.size(); }
  LayerCache& layer(size_t i) { return layers_[i]; }
  const LayerCache& layer(size_t i) const { return layers_[i]; }
  const Method& method() const { return method_; }
  // Every layer reports to `o` (null: none) from now on.
  void set_observer(CacheObserver* o) {
    for (auto& l : layers_) l.set_observer(o);
  }
  void clear();
  MemoryUsage memory() const;

 private:
  Method method_;
  std::vector<LayerCache> layers_;
};

}  // namespace vq::kv
