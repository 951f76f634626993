#include "src/engine/session_file.h"

#include <fmt/format.h>

#include <cmath>

#include "src/core/byte_io.h"
#include "src/kv/cache_io.h"
#include "src/core/checked_file.h"
#include "veloxquant/error.h"

namespace vq::engine {

namespace {
constexpr char kMagic[9] = "VQKVSESS";
constexpr uint32_t kVersion = 11;  // 2: the cache names its calibration; 3: q4 values keep channels in lanes;
                                   // 4: TurboQuant-MSE/RVQ blocks keep tokens in lanes (turbo_lanes.h);
                                   // 5: RaBitQ stores one factor per token (TurboQuant's rows and lanes),
                                   //    QJL keys without outlier channels keep tokens in lanes;
                                   // 6: KIVI's 2/4-bit key codes sit in byte fields and its values
                                   //    keep channels in lanes (kivi_lanes.h);
                                   // 7: one-bit TurboQuant-MSE and RaBitQ values keep a plane of
                                   //    token bits per channel (turbo_sign_lanes.h);
                                   // 8: TurboQuant's fractional split keeps each part as blocks of
                                   //    its own codec after the group's mask (turbo_split.cpp);
                                   // 9: TurboQuant-Prod blocks are two lane parts, codes and signs;
                                   // 10: QJL keys with outlier channels keep tokens in lanes;
                                   // 11: KVQuant keeps tokens in lanes (kvquant_lanes.cpp) and its
                                   //     outlier slots hold the difference from the dense decode
}  // namespace

void save_session(const std::string& path, const Session& session, const SessionState& state) {
  const Model& model = session.model();
  VQ_ASSERT(int64_t(state.last_logits.size()) == model.config().n_vocab);
  ByteWriter w;
  w.str(session.cache().method().spec());
  w.u64(model.file().file_size());
  w.u32(model.file().content_crc32());
  w.i64(session.n_past());
  w.i64(model.config().n_vocab);
  w.raw(state.last_logits.data(), state.last_logits.size() * sizeof(float));
  for (uint64_t v : state.rng) w.u64(v);
  kv::save_cache(session.cache(), w);
  write_checked_file(path, kMagic, kVersion, w.data());
}

SessionFile SessionFile::read(const std::string& path) {
  SessionFile f;
  f.path_ = path;
  f.payload_ = read_checked_file(path, kMagic, kVersion);
  ByteReader r(f.payload_.data(), f.payload_.size(), path);
  f.spec_ = r.str("method", 4096);
  f.model_size_ = r.u64("model size");
  f.model_crc_ = r.u32("model checksum");
  f.n_past_ = r.i64_in("position", 0, int64_t(1) << 40);
  f.body_at_ = f.payload_.size() - r.remaining();
  return f;
}

SessionState SessionFile::restore(Session& session) const {
  const Model& model = session.model();
  VQ_CHECK(session.n_past() == 0, "a saved cache loads into a fresh session only");
  VQ_CHECK(kv::canonical_spec(spec_) == session.cache().method().spec(),
           fmt::format("{}: saved with --kv {}, but --kv {} was asked for", path_, spec_,
                       session.cache().method().spec()));
  VQ_CHECK(model_size_ == model.file().file_size() && model_crc_ == model.file().content_crc32(),
           fmt::format("{}: saved for another model (size {}, CRC-32 {:08x}); {} is size {}, CRC-32 {:08x}", path_,
                       model_size_, model_crc_, model.file().path(), model.file().file_size(),
                       model.file().content_crc32()));
  VQ_CHECK(n_past_ <= session.n_ctx(),
           fmt::format("{}: holds {} tokens, more than the context size {} (raise -c)", path_, n_past_,
                       session.n_ctx()));
  ByteReader r(payload_.data() + body_at_, payload_.size() - body_at_, path_);
  const int64_t n_vocab = r.i64("vocabulary size");
  r.check(n_vocab == model.config().n_vocab, "vocabulary size",
          fmt::format("{} in the file, {} in the model", n_vocab, model.config().n_vocab));
  SessionState st;
  st.last_logits.resize(size_t(n_vocab));
  r.raw(st.last_logits.data(), size_t(n_vocab) * sizeof(float), "logits");
  for (float v : st.last_logits) r.check(!std::isnan(v), "logits", "holds NaN");
  for (auto& v : st.rng) v = r.u64("sampler state");
  session.restore_cache(r, n_past_);
  r.check(r.remaining() == 0, "end", fmt::format("{} bytes after the cache", r.remaining()));
  return st;
}

}  // namespace vq::engine
