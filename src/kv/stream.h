// TokenStream: the storage of one KV head's keys (or values) in one layer:
// fp16 sinks | pages of compressed blocks | fp16 residual window (a ring).
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "src/core/aligned_buffer.h"
#include "src/core/byte_io.h"

namespace vq::kv {

// A run of tokens stored one way, covering positions [pos_begin, pos_end).
struct Segment {
  bool compressed = false;
  int64_t pos_begin = 0, pos_end = 0;
  // fp16 rows: row of position p at half + (p - pos_begin) * head_dim.
  const uint16_t* half = nullptr;
  // Compressed: a run of whole blocks whose token 0 has position run_pos0.
  const uint8_t* blocks = nullptr;
  int64_t run_pos0 = 0;
};

// Writes `step` tokens x (starting at position pos0) into `block` from slot `slot` on: a whole
// block (step == block_tokens, slot 0) or a single token into its slot (step == 1).
using BlockEncoder = std::function<void(const float* x, int64_t pos0, int slot, uint8_t* block)>;

// Writes n tokens x (head_dim floats each, from position pos0) into slots slot.. of `block`
// (a codec's encode_tokens).
using RunEncoder = std::function<void(const float* x, int64_t pos0, int slot, int n, uint8_t* block)>;

class TokenStream {
 public:
  // step: tokens leaving the window at a time, block_tokens (whole blocks) or 1 (codecs that
  // encode each token on its own into its slot, so no token waits in fp16 for a block to fill).
  // page_tokens: about how many tokens a page holds (page_tokens_for()).
  TokenStream(int head_dim, int block_tokens, size_t block_bytes, int keep, int sinks, int step,
              int64_t page_tokens);

  // Pages of 256 tokens keep attention's calls long (longer where the value codec asks for longer
  // runs: a call never crosses a page); a sliding-window layer, which holds little more than its
  // window, uses pages of 64 so that the unfilled tail of its last page and its partly visible
  // first page waste little.
  static int64_t page_tokens_for(int64_t sliding_window, int64_t preferred_run = 0) {
    return sliding_window > 0 ? 64 : std::max<int64_t>(256, preferred_run);
  }
  // Blocks per page for a given block size.
  static int64_t blocks_per_page(int block_tokens, int64_t page_tokens);

  // Appends the token at the next position; flushes the window's oldest `step` tokens through
  // `encode` when the window holds keep + step.
  void push(const float* x, const BlockEncoder& encode);
  // push for n tokens (x_stride floats apart). Where tokens leave one at a time and nothing stays
  // in fp16 after the sinks (step 1, no window), the tokens that share a block go to `run` at
  // once, rounded through fp16 as the window would: the same bytes as n pushes.
  void push_run(const float* x, size_t x_stride, int n, const BlockEncoder& encode, const RunEncoder& run);
  // Frees whole pages whose tokens all lie before position `pos` (sliding-window layers).
  void evict_before(int64_t pos);
  void clear();

  int64_t n_positions() const { return n_sink_ + n_comp_ + win_count_; }
  int64_t retained_tokens() const;
  int64_t compressed_tokens() const { return n_comp_ - first_block_ * block_tokens_; }
  // Segments in position order.
  void segments(std::vector<Segment>* out) const;

  size_t page_bytes() const;

  // Everything the stream holds (counters, sinks, pages, window), and back into a fresh stream
  // of the same shape; load checks every count against the shape before allocating.
  void save(ByteWriter& w) const;
  void load(ByteReader& r);
  size_t window_bytes() const { return window_.bytes(); }
  size_t sink_bytes() const { return sinks_.bytes(); }

 private:
  int64_t block_pos(int64_t b) const { return sinks_capacity_ + b * block_tokens_; }
  void flush(const BlockEncoder& encode);
  uint8_t* block_for_next();  // the block the next compressed token goes to (a new page at need)

  int d_, block_tokens_, keep_, sinks_capacity_, step_;
  size_t block_bytes_;
  int64_t blocks_per_page_;
  AlignedBuffer<uint16_t> sinks_;
  int64_t n_sink_ = 0;
  std::deque<AlignedBuffer<uint8_t>> pages_;
  int64_t first_block_ = 0;  // index of the first retained block (start of pages_.front())
  int64_t n_comp_ = 0;       // tokens ever compressed (the last block may be partly filled)
  AlignedBuffer<uint16_t> window_;  // ring of keep + step rows
  int64_t win_start_ = 0, win_count_ = 0;
  std::vector<float> scratch_;
  std::vector<uint16_t> run_half_;
};

}  // namespace vq::kv
