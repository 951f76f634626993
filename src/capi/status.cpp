// The C API's error state, version and threads, and what several entry points share.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "src/capi/handles.h"
#include "src/core/threads.h"
#include "veloxquant/kv/calibration.h"

namespace vq::capi {
namespace {

// One message per thread, so that threads using different handles do not read each other's.
thread_local std::string t_last_error;

}  // namespace

vq_status fail(vq_status status, const std::string& message) {
  try {
    // The message is one line, whatever a lower layer put in it.
    t_last_error = message;
    for (char& c : t_last_error) {
      if (c == '\n' || c == '\r') c = ' ';
    }
  } catch (...) {
    t_last_error.clear();  // no memory for the message: the status still says what happened
  }
  return status;
}

void require_readable(const char* path, const char* what) {
  require_ptr(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open ({})", path, std::strerror(errno)));
}

vq_memory to_c(const kv::MemoryUsage& m) {
  vq_memory out{};
  out.total_bytes = m.total();
  out.block_bytes = m.block_bytes;
  out.window_bytes = m.window_bytes;
  out.sink_bytes = m.sink_bytes;
  out.param_bytes = m.param_bytes;
  out.key_elements_compressed = m.key_elements_compressed;
  out.value_elements_compressed = m.value_elements_compressed;
  out.elements_retained = m.elements_retained;
  return out;
}

kv::Method method_with_calibration(const char* spec, const char* calib_path, const engine::Model* model) {
  require_ptr(spec, "spec");
  kv::Method m = kv::parse_method(spec);
  if (!m.needs_calibration()) return m;
  VQ_CHECK(calib_path != nullptr,
           fmt::format("'{}' needs a calibration made for it: make one with `veloxquant calibrate -m MODEL -f TEXT "
                       "--kv {} -o FILE` and pass its path",
                       m.spec(), m.spec()));
  require_readable(calib_path, "calib_path");
  auto c = std::make_shared<kv::Calibration>(kv::load_calibration(calib_path));
  if (model != nullptr) {
    const kv::ModelIdentity id = model->identity();
    VQ_CHECK(c->model == id,
             fmt::format("{} was made for the model {}, not for {}", calib_path, c->model.describe(), id.describe()));
  }
  // with_calibration refuses one made for another spec.
  return m.with_calibration(std::move(c));
}

}  // namespace vq::capi

using namespace vq::capi;

extern "C" {

VQ_API const char* vq_version(void) { return VQ_VERSION_STRING; }

VQ_API const char* vq_last_error(void) { return t_last_error.c_str(); }

VQ_API const char* vq_status_name(int status) {
  switch (status) {
    case VQ_OK: return "ok";
    case VQ_ERR_INVALID_ARGUMENT: return "invalid argument";
    case VQ_ERR_IO: return "i/o error";
    case VQ_ERR_DATA: return "bad data";
    case VQ_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case VQ_ERR_OUT_OF_MEMORY: return "out of memory";
    case VQ_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

VQ_API int vq_set_threads(int n) {
  try {
    vq::set_num_threads(n);
    return vq::num_threads();
  } catch (...) {
    return 1;
  }
}

}  // extern "C"
