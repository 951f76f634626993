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

}  // namespace
}  // namespace vq::kv
