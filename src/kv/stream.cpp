// TokenStream. Pages hold a fixed number of blocks (about 256 or 64 tokens), so memory grows in
// small steps and a sliding-window layer can free what it no longer needs.
#include "src/kv/stream.h"

#include <algorithm>

#include "src/core/fp16.h"
#include "veloxquant/error.h"

namespace vq::kv {

TokenStream::TokenStream(int head_dim, int block_tokens, size_t block_bytes, int keep, int sinks, int step,
                         int64_t page_tokens)
    : d_(head_dim),
      block_tokens_(block_tokens),
      keep_(keep),
      sinks_capacity_(sinks),
      step_(step),
      block_bytes_(block_bytes),
      blocks_per_page_(blocks_per_page(block_tokens, page_tokens)),
      sinks_(size_t(sinks) * head_dim),
      window_(size_t(keep + step) * head_dim),
      scratch_(size_t(step) * head_dim) {
  VQ_ASSERT(head_dim > 0 && block_tokens > 0 && keep >= 0 && sinks >= 0);
  VQ_ASSERT(step == 1 || step == block_tokens);
}

int64_t TokenStream::blocks_per_page(int block_tokens, int64_t page_tokens) {
  return std::max<int64_t>(1, (page_tokens + block_tokens - 1) / block_tokens);
}

void TokenStream::push(const float* x, const BlockEncoder& encode) {
  if (n_sink_ < sinks_capacity_) {
    f32_to_f16(x, sinks_.data() + size_t(n_sink_) * d_, size_t(d_));
    ++n_sink_;
    return;
  }
  const int64_t cap = keep_ + step_;
  const int64_t slot = (win_start_ + win_count_) % cap;
  f32_to_f16(x, window_.data() + size_t(slot) * d_, size_t(d_));
  ++win_count_;
  if (win_count_ == cap) flush(encode);
}

void TokenStream::flush(const BlockEncoder& encode) {
  const int64_t cap = keep_ + step_;
  for (int i = 0; i < step_; ++i) {
    const int64_t slot = (win_start_ + i) % cap;
    f16_to_f32(window_.data() + size_t(slot) * d_, scratch_.data() + size_t(i) * d_, size_t(d_));
  }
  const int64_t b = n_comp_ / block_tokens_;
  const int slot = int(n_comp_ % block_tokens_);
  encode(scratch_.data(), block_pos(b) + slot, slot, block_for_next());
  n_comp_ += step_;
  win_start_ = (win_start_ + step_) % cap;
  win_count_ -= step_;
}

uint8_t* TokenStream::block_for_next() {
  const int64_t b = n_comp_ / block_tokens_;
  const int slot = int(n_comp_ % block_tokens_);
  const int64_t in_page = (b - first_block_) % blocks_per_page_;
  // Pages start zeroed: the unfilled slots of a partly written block hold zeros.
  if (in_page == 0 && slot == 0) pages_.emplace_back(size_t(blocks_per_page_) * block_bytes_);
  return pages_.back().data() + size_t(in_page) * block_bytes_;
}

void TokenStream::push_run(const float* x, size_t x_stride, int n, const BlockEncoder& encode, const RunEncoder& run) {
  int i = 0;
  for (; i < n && (n_sink_ < sinks_capacity_ || step_ != 1 || keep_ > 0 || !run); ++i) {
    push(x + size_t(i) * x_stride, encode);
  }
  while (i < n) {
    const int slot = int(n_comp_ % block_tokens_);
    const int r = int(std::min<int64_t>(n - i, block_tokens_ - slot));
    scratch_.resize(std::max(scratch_.size(), size_t(r) * d_));
    run_half_.resize(size_t(d_));
    for (int t = 0; t < r; ++t) {
      f32_to_f16(x + size_t(i + t) * x_stride, run_half_.data(), size_t(d_));
      f16_to_f32(run_half_.data(), scratch_.data() + size_t(t) * d_, size_t(d_));
    }
    uint8_t* block = block_for_next();
    run(scratch_.data(), block_pos(n_comp_ / block_tokens_) + slot, slot, r, block);
    n_comp_ += r;
    i += r;
  }
}

void TokenStream::evict_before(int64_t pos) {
  // Keep at least the page being filled.
  while (pages_.size() > 1 && block_pos(first_block_ + blocks_per_page_) <= pos) {
    pages_.pop_front();
    first_block_ += blocks_per_page_;
  }
}

void TokenStream::clear() {
  n_sink_ = 0;
  pages_.clear();
  first_block_ = n_comp_ = 0;
  win_start_ = win_count_ = 0;
}

int64_t TokenStream::retained_tokens() const { return n_sink_ + compressed_tokens() + win_count_; }

size_t TokenStream::page_bytes() const {
  size_t total = 0;
  for (const auto& p : pages_) total += p.bytes();
  return total;
}

void TokenStream::segments(std::vector<Segment>* out) const {
  out->clear();
  out->reserve(pages_.size() + 3);  // sinks, pages, the window's two runs
  if (n_sink_ > 0) {
    Segment s;
    s.pos_begin = 0;
    s.pos_end = n_sink_;
    s.half = sinks_.data();
    out->push_back(s);
  }
  const int64_t comp_end = sinks_capacity_ + n_comp_;  // first position not compressed
  int64_t b = first_block_;
  for (const auto& page : pages_) {
    if (block_pos(b) >= comp_end) break;
    Segment s;
    s.compressed = true;
    s.pos_begin = s.run_pos0 = block_pos(b);
    s.pos_end = std::min(block_pos(b + blocks_per_page_), comp_end);
    s.blocks = page.data();
    out->push_back(s);
    b += blocks_per_page_;
  }
  const int64_t cap = keep_ + step_;
  int64_t pos = comp_end;
  int64_t left = win_count_, slot = win_start_;
  while (left > 0) {
    const int64_t run = std::min(left, cap - slot);
    Segment s;
    s.pos_begin = pos;
    s.pos_end = pos + run;
    s.half = window_.data() + size_t(slot) * d_;
    out->push_back(s);
    pos += run;
    left -= run;
    slot = 0;
  }
}

}  // namespace vq::kv
