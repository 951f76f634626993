#include "tools/veloxquant/saved_session.h"

#include <fmt/format.h>

#include "veloxquant/error.h"
#include "veloxquant/kv/method.h"

namespace vq::cli {

SavedSession open_saved_session(const std::string& load_path, const std::string& kv, bool kv_given) {
  SavedSession s;
  s.spec = kv;
  if (load_path.empty()) return s;
  s.file = engine::SessionFile::read(load_path);
  VQ_CHECK(!kv_given || kv::parse_method(kv).spec() == s.file->method_spec(),
           fmt::format("{}: saved with --kv {}, but --kv {} was given", load_path, s.file->method_spec(),
                       kv::parse_method(kv).spec()));
  s.spec = s.file->method_spec();
  return s;
}

void restore_saved_session(const engine::SessionFile& file, engine::Session& session, engine::Sampler& sampler,
                           std::vector<float>* logits) {
  const engine::SessionState st = file.restore(session);
  *logits = st.last_logits;
  sampler.rng().set_state(st.rng);
}

void save_current_session(const std::string& path, const engine::Session& session, engine::Sampler& sampler,
                          const std::vector<float>& logits) {
  engine::SessionState st;
  st.last_logits = logits;
  const uint64_t* rs = sampler.rng().state();
  for (int i = 0; i < 4; ++i) st.rng[i] = rs[i];
  engine::save_session(path, session, st);
}

}  // namespace vq::cli
