// The cache's storage rules: sinks, window flushes by whole blocks, positions, eviction.
#include <gtest/gtest.h>

#include <vector>

#include "src/kv/stream.h"

namespace vq::kv {
namespace {

// A fake encoder that records what it was given.
struct Recorder {
  std::vector<int64_t> flushed_pos;
  BlockEncoder encoder() {
    return [this](const float*, int64_t pos0, int slot, uint8_t* block) {
      flushed_pos.push_back(pos0);
      block[slot] = 1;
    };
  }
};

TEST(TokenStream, WindowFlushesOldestBlock) {
  // keep 3, blocks of 4: flush when the window holds 7, leaving the newest 3.
  TokenStream s(8, 4, 16, 3, 2, 4, 256);
  Recorder rec;
  const auto enc = rec.encoder();
  std::vector<float> x(8, 1.0f);
  for (int i = 0; i < 2 + 6; ++i) s.push(x.data(), enc);
  EXPECT_TRUE(rec.flushed_pos.empty());
  s.push(x.data(), enc);  // 2 sinks + 7 in the window
  ASSERT_EQ(rec.flushed_pos.size(), 1u);
  EXPECT_EQ(rec.flushed_pos[0], 2);  // first block starts after the sinks
  EXPECT_EQ(s.compressed_tokens(), 4);
  EXPECT_EQ(s.n_positions(), 9);
  std::vector<Segment> segs;
  s.segments(&segs);
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[0].pos_begin, 0);
  EXPECT_EQ(segs[0].pos_end, 2);
  EXPECT_TRUE(segs[1].compressed);
  EXPECT_EQ(segs[1].pos_begin, 2);
  EXPECT_EQ(segs[1].pos_end, 6);
  EXPECT_EQ(segs[2].pos_begin, 6);
  EXPECT_EQ(segs[2].pos_end, 9);
}

TEST(TokenStream, ZeroKeepEncodesEveryToken) {
  TokenStream s(4, 1, 8, 0, 0, 1, 256);
  Recorder rec;
  const auto enc = rec.encoder();
  std::vector<float> x(4, 1.0f);
  for (int i = 0; i < 5; ++i) s.push(x.data(), enc);
  EXPECT_EQ(rec.flushed_pos, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.window_bytes(), 64u);  // one row, padded to the alignment
}

TEST(TokenStream, EvictsWholePagesOnly) {
  TokenStream s(4, 1, 8, 0, 0, 1, 256);
  Recorder rec;
  const auto enc = rec.encoder();
  std::vector<float> x(4, 1.0f);
  for (int i = 0; i < 1000; ++i) s.push(x.data(), enc);
  const size_t before = s.page_bytes();
  s.evict_before(600);  // pages of 256 tokens: [0,256) and [256,512) go
  EXPECT_EQ(s.compressed_tokens(), 1000 - 512);
  EXPECT_LT(s.page_bytes(), before);
  std::vector<Segment> segs;
  s.segments(&segs);
  EXPECT_EQ(segs.front().pos_begin, 512);
  EXPECT_EQ(segs.back().pos_end, 1000);
}

TEST(TokenStream, SingleTokenStepFillsBlocksSlotBySlot) {
  // Blocks of 4 written one token at a time: no token waits in the window for its block.
  TokenStream s(4, 4, 16, 0, 1, 1, 256);
  std::vector<int> slots;
  const BlockEncoder enc = [&](const float*, int64_t, int slot, uint8_t* block) {
    slots.push_back(slot);
    block[slot] = uint8_t(1 + slot);
  };
  std::vector<float> x(4, 1.0f);
  for (int i = 0; i < 7; ++i) s.push(x.data(), enc);  // 1 sink + 6 compressed
  EXPECT_EQ(slots, (std::vector<int>{0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(s.compressed_tokens(), 6);
  EXPECT_EQ(s.n_positions(), 7);
  std::vector<Segment> segs;
  s.segments(&segs);
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_TRUE(segs[1].compressed);
  EXPECT_EQ(segs[1].pos_begin, 1);
  EXPECT_EQ(segs[1].pos_end, 7);
  EXPECT_EQ(segs[1].blocks[4], 0);  // block 0 is 16 bytes: block 1's first byte at 16
  EXPECT_EQ(segs[1].blocks[16], 1);
  EXPECT_EQ(segs[1].blocks[17], 2);
  EXPECT_EQ(segs[1].blocks[18], 0);  // not yet written: zero
}

// A prompt's tokens pushed as runs reach a single-token codec in runs that share a block, rounded
// through fp16 as when pushed one by one: the same values, positions, slots and bytes, across
// blocks and pages, after a sink that takes its token on its own.
TEST(TokenStream, RunsEncodeAsSingleTokensDo) {
  const int d = 2, n = 23, stride = 3 * d;  // rows stride apart, as one head among others
  std::vector<float> x(size_t(n) * stride);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * float(i) + 1e-4f;  // not exact in fp16
  using Seen = std::vector<std::vector<float>>;
  Seen seen_one, seen_run;
  std::vector<int> runs;
  const auto encoder = [](Seen* seen) -> BlockEncoder {
    return [seen](const float* t, int64_t pos, int slot, uint8_t* block) {
      seen->push_back({t[0], t[1], float(pos), float(slot)});
      block[slot] = uint8_t(1 + seen->size());
    };
  };
  const RunEncoder run = [&](const float* t, int64_t pos0, int slot, int count, uint8_t* block) {
    runs.push_back(count);
    for (int i = 0; i < count; ++i) {
      seen_run.push_back({t[i * d], t[i * d + 1], float(pos0 + i), float(slot + i)});
      block[slot + i] = uint8_t(1 + seen_run.size());
    }
  };
  TokenStream one(d, 4, 4, 0, 1, 1, 8), many(d, 4, 4, 0, 1, 1, 8);
  for (int i = 0; i < n; ++i) one.push(x.data() + size_t(i) * stride, encoder(&seen_one));
  many.push_run(x.data(), stride, 6, encoder(&seen_run), run);
  many.push_run(x.data() + 6 * stride, stride, n - 6, encoder(&seen_run), run);
  EXPECT_EQ(seen_one.size(), size_t(n - 1));  // the sink is kept, not encoded
  EXPECT_EQ(seen_run, seen_one);
  EXPECT_EQ(runs, (std::vector<int>{4, 1, 3, 4, 4, 4, 2}));
  std::vector<Segment> a, b;
  one.segments(&a);
  many.segments(&b);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].compressed, b[i].compressed);
    ASSERT_EQ(a[i].pos_begin, b[i].pos_begin);
    ASSERT_EQ(a[i].pos_end, b[i].pos_end);
    const int64_t count = a[i].pos_end - a[i].pos_begin;
    if (a[i].compressed) {
      EXPECT_EQ(std::vector<uint8_t>(a[i].blocks, a[i].blocks + count), std::vector<uint8_t>(b[i].blocks, b[i].blocks + count));
    } else {
      EXPECT_EQ(std::vector<uint16_t>(a[i].half, a[i].half + count * d), std::vector<uint16_t>(b[i].half, b[i].half + count * d));
    }
  }
}

}  // namespace
}  // namespace vq::kv
