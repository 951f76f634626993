// What the C API's opaque handles hold, and the guard every entry point runs its body in: it turns
// any exception into a vq_status and the thread's one-line message, so none crosses into C.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "src/engine/detokenizer.h"
#include "src/engine/model.h"
#include "src/engine/sampler.h"
#include "src/engine/session.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"
#include "veloxquant/kv/method.h"
#include "veloxquant/veloxquant.h"

struct vq_method {
  vq::kv::Method method;
};

struct vq_cache {
  vq::kv::Method method;
  std::vector<vq::kv::LayerConfig> layers;
  std::unique_ptr<vq::kv::KvCache> cache;
  // Per layer, the tokens of the last append: on a sliding-window layer the cache keeps only
  // what queries from there on can see.
  std::vector<int64_t> last_append;
  // Attention scratch kept across calls, so a decode step allocates nothing.
  mutable vq::kv::AttendWorkspace workspace;
};

struct vq_model {
  std::unique_ptr<vq::engine::Model> model;
  std::string path, name;
};

struct vq_session {
  vq_session(const vq_model* m, vq::kv::Method meth)
      : model(m), method(std::move(meth)), detok(m->model->tokenizer()) {}
  const vq_model* model;
  vq::kv::Method method;
  std::unique_ptr<vq::engine::Session> session;
  std::vector<float> logits;  // of the last token fed (empty before the first feed)
  vq::engine::Detokenizer detok;
  std::string text;  // the last generate step's text
};

struct vq_sampler {
  vq::engine::Sampler sampler;
};

namespace vq::capi {

// Sets the thread's message and returns `status`.
vq_status fail(vq_status status, const std::string& message);

// A usage error naming the argument: thrown from inside a guarded body.
[[noreturn]] inline void bad_argument(const std::string& message) { throw_error(ErrorKind::kUsage, message); }
inline void require(bool ok, const char* message) {
  if (!ok) bad_argument(message);
}
template <class T>
void require_ptr(const T* p, const char* name) {
  if (p == nullptr) bad_argument(fmt::format("{} is NULL", name));
}

// Refuses (VQ_ERR_IO, through an IoError) a path that cannot be opened for reading, before the
// library's own readers see it, so that a missing file is told apart from a damaged one.
struct IoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void require_readable(const char* path, const char* what);

// A caller's buffer too small for the result (VQ_ERR_BUFFER_TOO_SMALL); the size needed has been
// written already.
struct BufferTooSmall : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] inline void throw_buffer_too_small(const std::string& message) { throw BufferTooSmall(message); }

// Runs body() and maps what it throws to a status.
template <class Fn>
vq_status guard(Fn&& body) noexcept {
  try {
    body();
    return VQ_OK;
  } catch (const IoError& e) {
    return fail(VQ_ERR_IO, e.what());
  } catch (const BufferTooSmall& e) {
    return fail(VQ_ERR_BUFFER_TOO_SMALL, e.what());
  } catch (const Error& e) {
    switch (e.kind()) {
      case ErrorKind::kUsage: return fail(VQ_ERR_INVALID_ARGUMENT, e.what());
      case ErrorKind::kData: return fail(VQ_ERR_DATA, e.what());
      case ErrorKind::kInternal: return fail(VQ_ERR_INTERNAL, e.what());
    }
    return fail(VQ_ERR_INTERNAL, e.what());
  } catch (const std::bad_alloc&) {
    return fail(VQ_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(VQ_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(VQ_ERR_INTERNAL, "unknown exception");
  }
}

// The memory figures in the C struct.
vq_memory to_c(const kv::MemoryUsage& m);

// The method of `spec`, carrying the calibration in calib_path when it needs one (and refusing
// one made for another spec); with a model, also refusing a calibration made for another model.
kv::Method method_with_calibration(const char* spec, const char* calib_path, const engine::Model* model);

}  // namespace vq::capi
