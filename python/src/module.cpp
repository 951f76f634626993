// veloxquant._core: the C API (include/veloxquant/veloxquant.h) for Python, through nanobind.
// Thin on purpose: each class owns one handle, arrays cross as NumPy arrays without a copy where
// their layout allows, compute runs with the GIL released, and a failed call raises the
// library's one-line message (ValueError for bad input or a damaged file, OSError for a file
// that cannot be read or written). The Pythonic surface is python/veloxquant/__init__.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "veloxquant/veloxquant.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// Raises the last error of this thread as a Python exception (the GIL must be held).
void check(vq_status s) {
  if (s == VQ_OK) return;
  PyObject* type = PyExc_RuntimeError;
  switch (s) {
    case VQ_ERR_INVALID_ARGUMENT: case VQ_ERR_DATA: type = PyExc_ValueError; break;
    case VQ_ERR_IO: type = PyExc_OSError; break;
    case VQ_ERR_OUT_OF_MEMORY: type = PyExc_MemoryError; break;
    default: break;
  }
  PyErr_SetString(type, vq_last_error());
  throw nb::python_error();
}

// Runs a C API call with the GIL released, then raises its error, if any, with the GIL held.
template <typename F>
void run(F&& f) {
  vq_status s;
  {
    nb::gil_scoped_release release;
    s = f();
  }
  check(s);
}

// The text of a C API call that writes into (buffer, capacity) and reports the length it needs:
// asked once for the length, then once to fill.
template <typename F>
std::string sized_text(F&& call) {
  size_t len = 0;
  const vq_status s = call(nullptr, 0, &len);
  if (s != VQ_ERR_BUFFER_TOO_SMALL) check(s);
  std::string text(len + 1, '\0');
  check(call(text.data(), text.size(), &len));
  text.resize(len);
  return text;
}

using F32Array = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
using AnyArray = nb::ndarray<nb::c_contig, nb::device::cpu>;

// A new float32 NumPy array of the given shape that owns `data`.
nb::ndarray<nb::numpy, float> owned_array(std::vector<float>&& data, std::initializer_list<size_t> shape) {
  auto* heap = new std::vector<float>(std::move(data));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return nb::ndarray<nb::numpy, float>(heap->data(), shape.size(), shape.begin(), owner);
}

nb::dict make_dict(std::initializer_list<std::pair<const char*, nb::object>> items) {
  nb::dict d;
  for (const auto& [key, value] : items) d[key] = value;
  return d;
}

nb::dict memory_dict(const vq_memory& m) {
  nb::dict d;
  d["total_bytes"] = m.total_bytes;
  d["block_bytes"] = m.block_bytes;
  d["window_bytes"] = m.window_bytes;
  d["sink_bytes"] = m.sink_bytes;
  d["param_bytes"] = m.param_bytes;
  d["key_elements_compressed"] = m.key_elements_compressed;
  d["value_elements_compressed"] = m.value_elements_compressed;
  d["elements_retained"] = m.elements_retained;
  return d;
}

nb::list methods() {
  nb::list out;
  for (int i = 0; i < vq_method_count(); ++i) {
    const char *name, *summary;
    check(vq_method_name(i, &name, &summary));
    int n_params = 0;
    check(vq_method_param_count(i, &n_params));
    nb::list params;
    for (int p = 0; p < n_params; ++p) {
      vq_method_param info;
      check(vq_method_param_info(i, p, &info));
      static const char* const kTypes[] = {"int", "float", "bool", "choice"};
      params.append(make_dict({{"name", nb::cast(info.name)}, {"help", nb::cast(info.help)}, {"type", nb::cast(kTypes[info.type & 3])}, {"default", nb::cast(info.default_value)}, {"min", nb::cast(info.min)}, {"max", nb::cast(info.max)}}));
    }
    out.append(make_dict({{"name", nb::cast(name)}, {"summary", nb::cast(summary)}, {"params", nb::cast(params)}}));
  }
  return out;
}

struct Method {
  vq_method* h = nullptr;
  explicit Method(const std::string& spec) { check(vq_method_parse(spec.c_str(), &h)); }
  ~Method() { vq_method_free(h); }
  std::string spec() const { return vq_method_spec(h); }
  std::tuple<double, double, double> bits(int head_dim) const {
    double avg, k, v;
    check(vq_method_bits(h, head_dim, &avg, &k, &v));
    return {avg, k, v};
  }
  double bits_counted(int head_dim, int64_t ctx) const {
    double b;
    check(vq_method_bits_counted(h, head_dim, ctx, &b));
    return b;
  }
  bool needs_calibration() const { return vq_method_needs_calibration(h) != 0; }
  std::tuple<int, int> window() const {
    int w, s;
    check(vq_method_window(h, &w, &s));
    return {w, s};
  }
};

struct Cache {
  vq_cache* h = nullptr;
  explicit Cache(vq_cache* c) : h(c) {}
  Cache(const std::string& spec, int layers, int kv_heads, int head_dim, std::optional<std::vector<int32_t>> window,
        std::optional<std::string> calib, int rope_style, float rope_base, float rope_freq_scale, float softcap) {
    vq_cache_config c;
    vq_cache_config_init(&c);
    c.spec = spec.c_str();
    c.n_layers = layers;
    c.n_kv_heads = kv_heads;
    c.head_dim = head_dim;
    if (window) {
      if (window->size() != size_t(layers < 0 ? 0 : layers)) {
        throw nb::value_error("sliding_window: one entry per layer");
      }
      c.sliding_window = window->data();
    }
    if (calib) c.calib_path = calib->c_str();
    c.rope_style = rope_style;
    c.rope_base = rope_base;
    c.rope_freq_scale = rope_freq_scale;
    c.logit_softcap = softcap;
    run([&] { return vq_cache_create(&c, &h); });
  }
  ~Cache() { vq_cache_free(h); }

  void append(int layer, AnyArray k, AnyArray v) {
    if (k.ndim() != 3 || v.ndim() != 3 || k.shape(0) != v.shape(0) || k.shape(1) != v.shape(1) ||
        k.shape(2) != v.shape(2)) {
      throw nb::value_error("append: k and v must both be shaped (tokens, kv_heads, head_dim)");
    }
    const int64_t n = int64_t(k.shape(0));
    const int32_t heads = int32_t(k.shape(1)), dim = int32_t(k.shape(2));
    if (k.dtype() == nb::dtype<float>() && v.dtype() == nb::dtype<float>()) {
      const auto* kp = static_cast<const float*>(k.data());
      const auto* vp = static_cast<const float*>(v.data());
      run([&] { return vq_cache_append_f32(h, layer, kp, vp, n, heads, dim); });
    } else if (k.dtype() == nb::dtype<uint16_t>() || (k.dtype().code == uint8_t(nb::dlpack::dtype_code::Float) &&
                                                       k.dtype().bits == 16 && v.dtype() == k.dtype())) {
      const auto* kp = static_cast<const uint16_t*>(k.data());
      const auto* vp = static_cast<const uint16_t*>(v.data());
      run([&] { return vq_cache_append_f16(h, layer, kp, vp, n, heads, dim); });
    } else {
      throw nb::value_error("append: k and v must both be float32 or both float16");
    }
  }

  nb::ndarray<nb::numpy, float> attend(int layer, F32Array q, std::optional<nb::ndarray<const int64_t, nb::c_contig,
                                       nb::device::cpu>> positions, float scale, bool reference) {
    if (q.ndim() != 3) throw nb::value_error("attend: q must be shaped (n_q, n_heads, head_dim)");
    const int64_t n_q = int64_t(q.shape(0));
    const int32_t heads = int32_t(q.shape(1)), dim = int32_t(q.shape(2));
    const int64_t* pos = nullptr;
    if (positions) {
      if (positions->ndim() != 1 || int64_t(positions->shape(0)) != n_q) {
        throw nb::value_error("attend: positions must hold one int64 per query token");
      }
      pos = positions->data();
    }
    std::vector<float> out(size_t(n_q) * size_t(heads) * size_t(dim));
    const float* qp = q.data();
    run([&] {
      return reference ? vq_cache_attend_reference(h, layer, qp, n_q, heads, dim, pos, scale, out.data())
                       : vq_cache_attend(h, layer, qp, n_q, heads, dim, pos, scale, out.data());
    });
    return owned_array(std::move(out), {size_t(n_q), size_t(heads), size_t(dim)});
  }

  // Seconds of each of `reps` vq_cache_attend calls made from C++ with the same arguments as
  // attend(): the baseline of the binding's overhead (bench/python_overhead.py).
  std::vector<double> time_attend(int layer, F32Array q, int reps) {
    if (q.ndim() != 3) throw nb::value_error("time_attend: q must be shaped (n_q, n_heads, head_dim)");
    const int64_t n_q = int64_t(q.shape(0));
    const int32_t heads = int32_t(q.shape(1)), dim = int32_t(q.shape(2));
    std::vector<float> out(size_t(n_q) * size_t(heads) * size_t(dim));
    std::vector<double> seconds;
    const float* qp = q.data();
    vq_status s = VQ_OK;
    {
      nb::gil_scoped_release release;
      for (int r = 0; r < reps && s == VQ_OK; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        s = vq_cache_attend(h, layer, qp, n_q, heads, dim, nullptr, 0.0f, out.data());
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    check(s);
    return seconds;
  }

  nb::dict memory(int layer) const {
    vq_memory m;
    check(vq_cache_memory(h, layer, &m));
    return memory_dict(m);
  }
  int64_t n_tokens(int layer) const {
    int64_t n;
    check(vq_cache_n_tokens(h, layer, &n));
    return n;
  }
  std::tuple<int, int, int> shape() const {
    int32_t l, k, d;
    check(vq_cache_shape(h, &l, &k, &d));
    return {l, k, d};
  }
};

struct Model {
  vq_model* h = nullptr;
  explicit Model(const std::string& path) { run([&] { return vq_model_load(path.c_str(), &h); }); }
  ~Model() { vq_model_free(h); }

  nb::dict info() const {
    vq_model_info i;
    check(vq_model_get_info(h, &i));
    return make_dict({{"arch", nb::cast(i.arch)}, {"name", nb::cast(i.name)}, {"n_vocab", nb::cast(i.n_vocab)}, {"n_layer", nb::cast(i.n_layer)}, {"n_embd", nb::cast(i.n_embd)}, {"n_head", nb::cast(i.n_head)}, {"n_kv_head", nb::cast(i.n_kv_head)}, {"head_dim", nb::cast(i.head_dim)}, {"n_ctx_train", nb::cast(i.n_ctx_train)}, {"bos", nb::cast(i.bos)}, {"eos", nb::cast(i.eos)}, {"eot", nb::cast(i.eot)}});
  }
  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special) const {
    std::vector<int32_t> ids(text.size() + 2);
    size_t n = 0;
    run([&] {
      return vq_tokenize(h, text.data(), text.size(), add_special, parse_special, ids.data(), ids.size(), &n);
    });
    ids.resize(n);
    return ids;
  }
  nb::bytes detokenize(const std::vector<int32_t>& ids, bool special) const {
    const std::string text = sized_text([&](char* buf, size_t cap, size_t* len) {
      return vq_detokenize(h, ids.data(), ids.size(), special, buf, cap, len);
    });
    return nb::bytes(text.data(), text.size());
  }
  bool is_eog(int32_t token) const { return vq_token_is_eog(h, token) != 0; }
  std::string chat_format(const std::vector<std::string>& roles, const std::vector<std::string>& contents,
                          std::optional<std::string> tmpl, bool add_generation_prompt) const {
    if (roles.size() != contents.size()) throw nb::value_error("chat: one role per message");
    std::vector<const char*> r, c;
    for (size_t i = 0; i < roles.size(); ++i) {
      r.push_back(roles[i].c_str());
      c.push_back(contents[i].c_str());
    }
    const char* t = tmpl ? tmpl->c_str() : nullptr;
    return sized_text([&](char* buf, size_t cap, size_t* len) {
      return vq_chat_format(h, t, r.data(), c.data(), r.size(), add_generation_prompt, buf, cap, len);
    });
  }
  nb::dict perplexity(const std::string& text, const std::string& kv, std::optional<std::string> calib, int64_t ctx,
                      int64_t chunks, int32_t ubatch, std::optional<uint64_t> kv_budget) const {
    vq_perplexity_config c;
    vq_perplexity_config_init(&c);
    c.kv_spec = kv.c_str();
    if (calib) c.calib_path = calib->c_str();
    c.n_ctx = ctx;
    c.n_chunks = chunks;
    c.ubatch = ubatch;
    if (kv_budget) c.kv_budget = *kv_budget;
    vq_perplexity_result r;
    run([&] { return vq_perplexity(h, text.data(), text.size(), &c, &r); });
    nb::dict d = make_dict({{"ctx", nb::cast(r.ctx)}, {"chunks", nb::cast(r.chunks)},
                            {"tokens_scored", nb::cast(r.tokens_scored)}, {"ppl", nb::cast(r.ppl)},
                            {"ppl_stderr", nb::cast(r.ppl_stderr)}, {"kv_bits_per_element", nb::cast(r.kv_bits_per_element)},
                            {"kv_key_bits", nb::cast(r.kv_key_bits)}, {"kv_value_bits", nb::cast(r.kv_value_bits)},
                            {"kv_window_tokens", nb::cast(r.kv_window_tokens)},
                            {"kv_sink_tokens", nb::cast(r.kv_sink_tokens)}});
    double counted;
    check(vq_perplexity_bits_counted(&r, &counted));
    d["kv_bits_counted"] = counted;
    if (r.compared) {
      d["kl_mean"] = r.kl_mean;
      d["kl_p99"] = r.kl_p99;
      d["top1_agreement"] = r.top1_agreement;
      d["ppl_fp16"] = r.ppl_fp16;
    }
    return d;
  }
};

struct Sampler {
  vq_sampler* h = nullptr;
  Sampler(float temperature, int32_t top_k, float top_p, float min_p, uint64_t seed) {
    vq_sampler_config c;
    vq_sampler_config_init(&c);
    c.temperature = temperature;
    c.top_k = top_k;
    c.top_p = top_p;
    c.min_p = min_p;
    c.seed = seed;
    check(vq_sampler_create(&c, &h));
  }
  ~Sampler() { vq_sampler_free(h); }
  int32_t sample(F32Array logits) {
    if (logits.ndim() != 1) throw nb::value_error("sample: logits must be one row of n_vocab floats");
    int32_t token;
    const float* p = logits.data();
    const int32_t n = int32_t(logits.shape(0));
    run([&] { return vq_sampler_sample(h, p, n, &token); });
    return token;
  }
};

struct Session {
  vq_session* h = nullptr;
  Session(const Model& model, const std::string& kv, std::optional<std::string> calib, int64_t n_ctx, int32_t ubatch,
          std::optional<uint64_t> kv_budget) {
    vq_session_config c;
    vq_session_config_init(&c);
    c.kv_spec = kv.c_str();
    if (calib) c.calib_path = calib->c_str();
    c.n_ctx = n_ctx;
    c.ubatch = ubatch;
    if (kv_budget) c.kv_budget = *kv_budget;
    run([&] { return vq_session_create(model.h, &c, &h); });
  }
  ~Session() { vq_session_free(h); }
  void feed(const std::vector<int32_t>& ids) { run([&] { return vq_session_feed(h, ids.data(), ids.size()); }); }
  nb::ndarray<nb::numpy, float> logits() const {
    const float* p;
    int32_t n;
    check(vq_session_logits(h, &p, &n));
    return owned_array(std::vector<float>(p, p + n), {size_t(n)});
  }
  // (token, text bytes now complete, done)
  std::tuple<int32_t, nb::bytes, bool> step(Sampler& sampler) {
    int32_t token = -1;
    const char* text = nullptr;
    size_t len = 0;
    int done = 0;
    run([&] { return vq_session_generate_step(h, sampler.h, &token, &text, &len, &done); });
    return {token, nb::bytes(text, len), done != 0};
  }
  nb::bytes flush_text() {
    const char* text;
    size_t len;
    check(vq_session_flush_text(h, &text, &len));
    return nb::bytes(text, len);
  }
  std::tuple<int64_t, int64_t> position() const {
    int64_t p, c;
    check(vq_session_position(h, &p, &c));
    return {p, c};
  }
  nb::dict memory() const {
    vq_memory m;
    check(vq_session_memory(h, &m));
    return memory_dict(m);
  }
  void clear() { check(vq_session_clear(h)); }
  std::string kv_spec() const { return vq_session_kv_spec(h); }
};

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "VeloxQuant's C API (the package veloxquant wraps it)";
  m.def("version", [] { return std::string(vq_version()); });
  m.def("set_threads", &vq_set_threads, "n"_a);
  m.def("methods", &methods);

  nb::class_<Method>(m, "Method")
      .def(nb::init<const std::string&>(), "spec"_a)
      .def_prop_ro("spec", &Method::spec)
      .def("bits", &Method::bits, "head_dim"_a)
      .def("bits_counted", &Method::bits_counted, "head_dim"_a, "ctx"_a)
      .def_prop_ro("needs_calibration", &Method::needs_calibration)
      .def("window", &Method::window);

  nb::class_<Cache>(m, "Cache")
      .def(nb::init<const std::string&, int, int, int, std::optional<std::vector<int32_t>>, std::optional<std::string>,
                    int, float, float, float>(),
           "spec"_a, "layers"_a, "kv_heads"_a, "head_dim"_a, "sliding_window"_a.none(), "calib"_a.none(),
           "rope_style"_a, "rope_base"_a, "rope_freq_scale"_a, "logit_softcap"_a)
      .def_static("load", [](const std::string& path, std::optional<std::string> calib) {
        vq_cache* c = nullptr;
        run([&] { return vq_cache_load(path.c_str(), calib ? calib->c_str() : nullptr, &c); });
        return new Cache(c);
      }, "path"_a, "calib"_a.none())
      .def("append", &Cache::append, "layer"_a, "k"_a, "v"_a)
      .def("attend", &Cache::attend, "layer"_a, "q"_a, "positions"_a.none(), "scale"_a, "reference"_a)
      .def("time_attend", &Cache::time_attend, "layer"_a, "q"_a, "reps"_a)
      .def("memory", &Cache::memory, "layer"_a)
      .def("n_tokens", &Cache::n_tokens, "layer"_a)
      .def("shape", &Cache::shape)
      .def("clear", [](Cache& c) { check(vq_cache_clear(c.h)); })
      .def("save", [](const Cache& c, const std::string& path) { run([&] { return vq_cache_save(c.h, path.c_str()); }); },
           "path"_a)
      .def_prop_ro("spec", [](const Cache& c) { return std::string(vq_cache_spec(c.h)); });

  nb::class_<Model>(m, "Model")
      .def(nb::init<const std::string&>(), "path"_a)
      .def("info", &Model::info)
      .def("tokenize", &Model::tokenize, "text"_a, "add_special"_a, "parse_special"_a)
      .def("detokenize", &Model::detokenize, "ids"_a, "special"_a)
      .def("is_eog", &Model::is_eog, "token"_a)
      .def("chat_format", &Model::chat_format, "roles"_a, "contents"_a, "template"_a.none(), "add_generation_prompt"_a)
      .def("perplexity", &Model::perplexity, "text"_a, "kv"_a, "calib"_a.none(), "ctx"_a, "chunks"_a, "ubatch"_a,
           "kv_budget"_a.none());

  nb::class_<Sampler>(m, "Sampler")
      .def(nb::init<float, int32_t, float, float, uint64_t>(), "temperature"_a, "top_k"_a, "top_p"_a, "min_p"_a,
           "seed"_a)
      .def("sample", &Sampler::sample, "logits"_a);

  nb::class_<Session>(m, "Session")
      .def(nb::init<const Model&, const std::string&, std::optional<std::string>, int64_t, int32_t,
                    std::optional<uint64_t>>(),
           "model"_a, "kv"_a, "calib"_a.none(), "n_ctx"_a, "ubatch"_a, "kv_budget"_a.none(), nb::keep_alive<1, 2>())
      .def("feed", &Session::feed, "ids"_a)
      .def("logits", &Session::logits)
      .def("step", &Session::step, "sampler"_a)
      .def("flush_text", &Session::flush_text)
      .def("position", &Session::position)
      .def("memory", &Session::memory)
      .def("clear", &Session::clear)
      .def_prop_ro("kv_spec", &Session::kv_spec);
}
