/* The C API from C: methods, a standalone KV cache held to a naive float attention and to the
 * library's reference attention, save and load, and every error path a caller can hit (null
 * pointers, wrong shapes, bad specs, missing and damaged files) returning a status and one line.
 * With a model path as argv[1], also the model, session, sampling and perplexity calls; with the
 * malformed-GGUF corpus (tests/data/gguf_corpus) as argv[2], every bad file refused with one line. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "veloxquant/veloxquant.h"

static int failures = 0;

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

/* A call that must fail with `status` and a one-line message containing `fragment`. */
#define CHECK_FAILS(call, status, fragment)                                                      \
  do {                                                                                           \
    vq_status s_ = (call);                                                                       \
    const char* m_ = vq_last_error();                                                            \
    if (s_ != (status) || strstr(m_, (fragment)) == NULL || strchr(m_, '\n') != NULL) {          \
      fprintf(stderr, "%s:%d: %s gave %s '%s', want %s with '%s'\n", __FILE__, __LINE__, #call, \
              vq_status_name(s_), m_, vq_status_name(status), fragment);                        \
      ++failures;                                                                                \
    }                                                                                            \
  } while (0)

#define CHECK_OK(call)                                                                                  \
  do {                                                                                                  \
    vq_status s_ = (call);                                                                              \
    if (s_ != VQ_OK) {                                                                                  \
      fprintf(stderr, "%s:%d: %s gave %s: %s\n", __FILE__, __LINE__, #call, vq_status_name(s_), vq_last_error()); \
      ++failures;                                                                                       \
    }                                                                                                   \
  } while (0)

static unsigned long long rng_state = 88172645463325252ull;
static float frand(void) { /* xorshift64, uniform in [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 4503599627370496.0 - 1.0);
}

/* Naive attention of one query token at `pos` over keys/values [n][G][d] (layer shape G, d). */
static void naive_attend(const float* q, int H, int G, int d, const float* k, const float* v, long pos, int window,
                         float scale, float* out) {
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / G);
    double mx = -INFINITY, sum = 0;
    long lo = window > 0 ? pos - window + 1 : 0;
    if (lo < 0) lo = 0;
    for (long t = lo; t <= pos; ++t) {
      double s = 0;
      for (int c = 0; c < d; ++c) s += (double)q[h * d + c] * k[(t * G + g) * d + c];
      s *= scale;
      if (s > mx) mx = s;
    }
    double acc[512] = {0};
    for (long t = lo; t <= pos; ++t) {
      double s = 0;
      for (int c = 0; c < d; ++c) s += (double)q[h * d + c] * k[(t * G + g) * d + c];
      const double w = exp(s * scale - mx);
      sum += w;
      for (int c = 0; c < d; ++c) acc[c] += w * v[(t * G + g) * d + c];
    }
    for (int c = 0; c < d; ++c) out[h * d + c] = (float)(acc[c] / sum);
  }
}

static float max_abs_diff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) {
    const float e = fabsf(a[i] - b[i]);
    if (!(e <= m)) m = e; /* NaN propagates as a failure */
  }
  return m;
}

static uint16_t to_half(float f) { /* round-to-nearest for the normal range the test uses */
  union { float f; uint32_t u; } x = {f};
  const uint32_t sign = (x.u >> 16) & 0x8000u;
  const int exp = (int)((x.u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x.u & 0x7fffffu;
  if (exp <= 0) return (uint16_t)sign;
  uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
  if ((mant & 0x1fffu) > 0x1000u || ((mant & 0x1fffu) == 0x1000u && (h & 1u))) ++h;
  return (uint16_t)h;
}

static void test_basics(void) {
  CHECK(strcmp(vq_version(), VQ_EXPECTED_VERSION) == 0);
  CHECK(strcmp(vq_status_name(VQ_ERR_IO), "i/o error") == 0);
  CHECK(strcmp(vq_status_name(99), "unknown status") == 0);
  CHECK(vq_set_threads(2) >= 1);
}

static void test_methods(void) {
  const int n = vq_method_count();
  CHECK(n >= 10);
  int saw_kivi = 0;
  for (int i = 0; i < n; ++i) {
    const char *name = NULL, *summary = NULL;
    CHECK_OK(vq_method_name(i, &name, &summary));
    CHECK(name && summary && name[0]);
    if (name && strcmp(name, "kivi") == 0) {
      saw_kivi = 1;
      int np = 0;
      CHECK_OK(vq_method_param_count(i, &np));
      CHECK(np >= 4);
      vq_method_param p;
      CHECK_OK(vq_method_param_info(i, 0, &p));
      CHECK(strcmp(p.name, "kbits") == 0 && p.default_value == 2);
      CHECK_FAILS(vq_method_param_info(i, np, &p), VQ_ERR_INVALID_ARGUMENT, "parameter index");
    }
  }
  CHECK(saw_kivi);
  CHECK_FAILS(vq_method_name(n, NULL, NULL), VQ_ERR_INVALID_ARGUMENT, "method index");
  CHECK_FAILS(vq_method_param_count(0, NULL), VQ_ERR_INVALID_ARGUMENT, "count is NULL");

  vq_method* m = NULL;
  CHECK_OK(vq_method_parse("kivi:kbits=2,vbits=2", &m));
  CHECK(strcmp(vq_method_spec(m), "kivi") == 0);
  double bits = 0, kb = 0, vb = 0;
  CHECK_OK(vq_method_bits(m, 128, &bits, &kb, &vb));
  CHECK(fabs(bits - 3.0) < 1e-9 && fabs(kb - 3.0) < 1e-9);
  int window = -1, sinks = -1;
  CHECK_OK(vq_method_window(m, &window, &sinks));
  CHECK(window == 128 && sinks == 0);
  /* 3 bits for 2048 - 128 tokens, 16 for the window's 128. */
  CHECK_OK(vq_method_bits_counted(m, 128, 2048, &bits));
  CHECK(fabs(bits - (1920.0 * 3 + 128.0 * 16) / 2048) < 1e-12);
  CHECK_OK(vq_method_bits_counted(m, 128, 100, &bits));
  CHECK(fabs(bits - 16.0) < 1e-12);
  CHECK_FAILS(vq_method_bits_counted(m, 128, 0, &bits), VQ_ERR_INVALID_ARGUMENT, "ctx 0");
  CHECK_FAILS(vq_method_bits_counted(m, 128, 2048, NULL), VQ_ERR_INVALID_ARGUMENT, "bits is NULL");
  CHECK(vq_method_needs_calibration(m) == 0);
  CHECK_FAILS(vq_method_bits(m, 0, &bits, NULL, NULL), VQ_ERR_INVALID_ARGUMENT, "head_dim 0");
  vq_method_free(m);
  CHECK_OK(vq_method_parse("q8", &m));
  CHECK_OK(vq_method_bits(m, 128, &bits, NULL, NULL));
  CHECK(fabs(bits - 8.5) < 1e-9);
  vq_method_free(m);
  CHECK_OK(vq_method_parse("kvquant:bits=3", &m));
  CHECK(vq_method_needs_calibration(m) == 1);
  vq_method_free(m);

  m = (vq_method*)1;
  CHECK_FAILS(vq_method_parse("q4:bits=x", &m), VQ_ERR_INVALID_ARGUMENT, "'bits'");
  CHECK(m == NULL);
  CHECK_FAILS(vq_method_parse("nosuch", &m), VQ_ERR_INVALID_ARGUMENT, "'nosuch'");
  CHECK_FAILS(vq_method_parse(NULL, &m), VQ_ERR_INVALID_ARGUMENT, "spec is NULL");
  CHECK_FAILS(vq_method_parse("q4", NULL), VQ_ERR_INVALID_ARGUMENT, "out is NULL");
  CHECK_FAILS(vq_method_bits(NULL, 128, &bits, NULL, NULL), VQ_ERR_INVALID_ARGUMENT, "method is NULL");
  CHECK(strcmp(vq_method_spec(NULL), "") == 0);
  vq_method_free(NULL);
}

enum { L = 2, G = 2, D = 64, H = 4, N1 = 150, N2 = 50, NQ = 3, WINDOW = 40 };

/* A two-layer cache (layer 1 with a sliding window), filled in two appends (f32 then f16), then
 * attended by NQ query tokens; fused against the reference, and against naive float attention. */
static void check_method(const char* spec, float tol_naive) {
  static float k[(N1 + N2) * G * D], v[(N1 + N2) * G * D], q[NQ * H * D];
  static uint16_t kh[N2 * G * D], vh[N2 * G * D];
  static float out[NQ * H * D], ref[NQ * H * D], naive[NQ * H * D];
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i) {
    k[i] = frand();
    v[i] = frand();
  }
  /* The f16 part holds exactly what the f32 arrays say, so one naive reference serves both. */
  for (size_t i = 0; i < N2 * G * D; ++i) {
    kh[i] = to_half(k[N1 * G * D + i]);
    vh[i] = to_half(v[N1 * G * D + i]);
  }
  for (size_t i = 0; i < sizeof q / sizeof q[0]; ++i) q[i] = frand();

  const int32_t windows[L] = {0, WINDOW};
  vq_cache_config c;
  vq_cache_config_init(&c);
  c.spec = spec;
  c.n_layers = L;
  c.n_kv_heads = G;
  c.head_dim = D;
  c.sliding_window = windows;
  vq_cache* cache = NULL;
  CHECK_OK(vq_cache_create(&c, &cache));
  if (!cache) return;
  for (int l = 0; l < L; ++l) {
    CHECK_OK(vq_cache_append_f32(cache, l, k, v, N1, G, D));
    CHECK_OK(vq_cache_append_f16(cache, l, kh, vh, N2, G, D));
    int64_t n = 0;
    CHECK_OK(vq_cache_n_tokens(cache, l, &n));
    CHECK(n == N1 + N2);
  }
  /* The f16 tokens as the naive attention sees them. */
  float k_used[(N1 + N2) * G * D], v_used[(N1 + N2) * G * D];
  memcpy(k_used, k, sizeof k_used);
  memcpy(v_used, v, sizeof v_used);
  for (size_t i = 0; i < N2 * G * D; ++i) {
    union { uint32_t u; float f; } a, b;
    /* expand the half exactly (normal range) */
    a.u = ((uint32_t)(kh[i] & 0x8000u) << 16) | ((uint32_t)(((kh[i] >> 10) & 0x1f) - 15 + 127) << 23) |
          ((uint32_t)(kh[i] & 0x3ffu) << 13);
    b.u = ((uint32_t)(vh[i] & 0x8000u) << 16) | ((uint32_t)(((vh[i] >> 10) & 0x1f) - 15 + 127) << 23) |
          ((uint32_t)(vh[i] & 0x3ffu) << 13);
    if ((kh[i] & 0x7fffu) == 0) a.u = (uint32_t)(kh[i] & 0x8000u) << 16;
    if ((vh[i] & 0x7fffu) == 0) b.u = (uint32_t)(vh[i] & 0x8000u) << 16;
    k_used[N1 * G * D + i] = a.f;
    v_used[N1 * G * D + i] = b.f;
  }
  const float scale = 1.0f / sqrtf((float)D);
  for (int l = 0; l < L; ++l) {
    const int64_t pos[NQ] = {N1 + N2 - 3, N1 + N2 - 2, N1 + N2 - 1};
    CHECK_OK(vq_cache_attend(cache, l, q, NQ, H, D, pos, 0.0f, out));
    CHECK_OK(vq_cache_attend_reference(cache, l, q, NQ, H, D, NULL, scale, ref));
    for (int i = 0; i < NQ; ++i) naive_attend(q + i * H * D, H, G, D, k_used, v_used, pos[i], windows[l], scale, naive + i * H * D);
    const float e_ref = max_abs_diff(out, ref, NQ * H * D);
    const float e_naive = max_abs_diff(out, naive, NQ * H * D);
    if (!(e_ref <= 1e-4f) || !(e_naive <= tol_naive)) {
      fprintf(stderr, "%s layer %d: fused vs reference %g (tol 1e-4), vs naive %g (tol %g)\n", spec, l, e_ref, e_naive,
              tol_naive);
      ++failures;
    }
  }
  vq_memory mem, m0, m1;
  CHECK_OK(vq_cache_memory(cache, -1, &mem));
  CHECK_OK(vq_cache_memory(cache, 0, &m0));
  CHECK_OK(vq_cache_memory(cache, 1, &m1));
  CHECK(mem.total_bytes == mem.block_bytes + mem.window_bytes + mem.sink_bytes + mem.param_bytes);
  CHECK(mem.total_bytes == m0.total_bytes + m1.total_bytes && mem.total_bytes > 0);

  /* Save, load: the same attention, bit for bit. */
  char path[64];
  snprintf(path, sizeof path, "/tmp/vq_capi_test_%d.vqc", (int)getpid());
  CHECK_OK(vq_cache_save(cache, path));
  vq_cache* back = NULL;
  CHECK_OK(vq_cache_load(path, NULL, &back));
  if (back) {
    CHECK(strcmp(vq_cache_spec(back), vq_cache_spec(cache)) == 0);
    for (int l = 0; l < L; ++l) {
      CHECK_OK(vq_cache_attend(cache, l, q, NQ, H, D, NULL, 0.0f, out));
      CHECK_OK(vq_cache_attend(back, l, q, NQ, H, D, NULL, 0.0f, ref));
      CHECK(memcmp(out, ref, sizeof out) == 0);
    }
    vq_memory mb;
    CHECK_OK(vq_cache_memory(back, -1, &mb));
    CHECK(mb.elements_retained == mem.elements_retained);
    vq_cache_free(back);
  }
  unlink(path);
  CHECK_OK(vq_cache_clear(cache));
  int64_t n = -1;
  CHECK_OK(vq_cache_n_tokens(cache, 0, &n));
  CHECK(n == 0);
  vq_cache_free(cache);
}

static void test_cache_methods(void) {
  check_method("fp16", 2e-3f);
  check_method("q8", 0.03f);
  check_method("q4:rot=1", 0.15f);
  check_method("kivi:residual=32", 0.5f);
  check_method("turbo:bits=4", 0.2f);
}

static void test_cache_errors(void) {
  vq_cache_config c;
  vq_cache_config_init(&c);
  vq_cache* cache = (vq_cache*)1;
  CHECK_FAILS(vq_cache_create(&c, &cache), VQ_ERR_INVALID_ARGUMENT, "config->spec is NULL");
  CHECK(cache == NULL);
  CHECK_FAILS(vq_cache_create(NULL, &cache), VQ_ERR_INVALID_ARGUMENT, "config is NULL");
  c.spec = "q4";
  CHECK_FAILS(vq_cache_create(&c, &cache), VQ_ERR_INVALID_ARGUMENT, "n_layers 0");
  c.n_layers = 1;
  c.n_kv_heads = 1;
  c.head_dim = 0;
  CHECK_FAILS(vq_cache_create(&c, &cache), VQ_ERR_INVALID_ARGUMENT, "head_dim 0");
  c.head_dim = 32;
  c.spec = "q4:rot=2";
  CHECK_FAILS(vq_cache_create(&c, &cache), VQ_ERR_INVALID_ARGUMENT, "rot=2");
  c.spec = "kvquant:bits=3";
  CHECK_FAILS(vq_cache_create(&c, &cache), VQ_ERR_INVALID_ARGUMENT, "calibration");
  c.calib_path = "/nonexistent/calib.vqcal";
  CHECK_FAILS(vq_cache_create(&c, &cache), VQ_ERR_IO, "/nonexistent/calib.vqcal: cannot open");
  c.calib_path = NULL;
  c.spec = "fp16";
  const int32_t bad_window[1] = {-1};
  c.sliding_window = bad_window;
  CHECK_FAILS(vq_cache_create(&c, &cache), VQ_ERR_INVALID_ARGUMENT, "sliding_window[0]");
  c.sliding_window = NULL;
  c.rope_style = 7;
  CHECK_FAILS(vq_cache_create(&c, &cache), VQ_ERR_INVALID_ARGUMENT, "rope_style 7");
  c.rope_style = VQ_ROPE_NONE;
  CHECK_OK(vq_cache_create(&c, &cache));

  float kv[4 * 32] = {0}, q[2 * 32] = {0}, out[2 * 32];
  CHECK_FAILS(vq_cache_attend(cache, 0, q, 1, 1, 32, NULL, 0, out), VQ_ERR_INVALID_ARGUMENT, "holds no tokens");
  CHECK_FAILS(vq_cache_append_f32(cache, 0, kv, kv, 4, 2, 32), VQ_ERR_INVALID_ARGUMENT, "shaped [tokens][2][32]");
  CHECK_FAILS(vq_cache_append_f32(cache, 1, kv, kv, 4, 1, 32), VQ_ERR_INVALID_ARGUMENT, "layer 1 is outside");
  CHECK_FAILS(vq_cache_append_f32(cache, 0, NULL, kv, 4, 1, 32), VQ_ERR_INVALID_ARGUMENT, "k is NULL");
  CHECK_FAILS(vq_cache_append_f16(cache, 0, NULL, NULL, 4, 1, 32), VQ_ERR_INVALID_ARGUMENT, "k is NULL");
  CHECK_FAILS(vq_cache_append_f32(cache, 0, kv, kv, -1, 1, 32), VQ_ERR_INVALID_ARGUMENT, "n_tokens -1");
  CHECK_FAILS(vq_cache_append_f32(NULL, 0, kv, kv, 4, 1, 32), VQ_ERR_INVALID_ARGUMENT, "cache is NULL");
  CHECK_OK(vq_cache_append_f32(cache, 0, kv, kv, 0, 1, 32));
  CHECK_OK(vq_cache_append_f32(cache, 0, kv, kv, 4, 1, 32));
  CHECK_FAILS(vq_cache_attend(cache, 0, q, 1, 0, 32, NULL, 0, out), VQ_ERR_INVALID_ARGUMENT, "n_heads 0");
  CHECK_FAILS(vq_cache_attend(cache, 0, q, 1, 1, 16, NULL, 0, out), VQ_ERR_INVALID_ARGUMENT, "head_dim 16");
  CHECK_FAILS(vq_cache_attend(cache, 0, q, 5, 1, 32, NULL, 0, out), VQ_ERR_INVALID_ARGUMENT, "position -1");
  const int64_t far[1] = {4};
  CHECK_FAILS(vq_cache_attend(cache, 0, q, 1, 1, 32, far, 0, out), VQ_ERR_INVALID_ARGUMENT, "position 4");
  CHECK_FAILS(vq_cache_attend(cache, 0, NULL, 1, 1, 32, NULL, 0, out), VQ_ERR_INVALID_ARGUMENT, "q is NULL");
  CHECK_FAILS(vq_cache_attend(cache, 0, q, 1, 1, 32, NULL, NAN, out), VQ_ERR_INVALID_ARGUMENT, "scale");
  CHECK_OK(vq_cache_attend(cache, 0, q, 2, 1, 32, NULL, 0, out));
  CHECK_FAILS(vq_cache_memory(cache, 3, NULL), VQ_ERR_INVALID_ARGUMENT, "out is NULL");
  vq_memory mem;
  CHECK_FAILS(vq_cache_memory(cache, 3, &mem), VQ_ERR_INVALID_ARGUMENT, "layer 3");

  /* Files: missing, unwritable, damaged, truncated, foreign. */
  vq_cache* back = NULL;
  CHECK_FAILS(vq_cache_load("/nonexistent/x.vqc", NULL, &back), VQ_ERR_IO, "cannot open");
  CHECK_FAILS(vq_cache_load(NULL, NULL, &back), VQ_ERR_INVALID_ARGUMENT, "path is NULL");
  CHECK_FAILS(vq_cache_save(cache, "/nonexistent/dir/x.vqc"), VQ_ERR_IO, "cannot write");
  char path[64];
  snprintf(path, sizeof path, "/tmp/vq_capi_err_%d.vqc", (int)getpid());
  CHECK_OK(vq_cache_save(cache, path));
  FILE* f = fopen(path, "rb");
  static unsigned char bytes[1 << 16];
  const size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
  if (f) fclose(f);
  CHECK(n > 64 && n < sizeof bytes);
  bytes[n / 2] ^= 0x10;
  f = fopen(path, "wb");
  if (f) {
    fwrite(bytes, 1, n, f);
    fclose(f);
  }
  CHECK_FAILS(vq_cache_load(path, NULL, &back), VQ_ERR_DATA, path);
  bytes[n / 2] ^= 0x10;
  f = fopen(path, "wb");
  if (f) {
    fwrite(bytes, 1, n - 7, f);
    fclose(f);
  }
  CHECK_FAILS(vq_cache_load(path, NULL, &back), VQ_ERR_DATA, path);
  f = fopen(path, "wb");
  if (f) {
    fputs("not a cache file at all, just some text", f);
    fclose(f);
  }
  CHECK_FAILS(vq_cache_load(path, NULL, &back), VQ_ERR_DATA, path);
  CHECK(back == NULL);
  unlink(path);
  vq_cache_free(cache);
  vq_cache_free(NULL);
}

static void test_model(const char* model_path) {
  vq_model* model = NULL;
  CHECK_FAILS(vq_model_load("/nonexistent/model.gguf", &model), VQ_ERR_IO, "cannot open");
  char path[64];
  snprintf(path, sizeof path, "/tmp/vq_capi_bad_%d.gguf", (int)getpid());
  FILE* f = fopen(path, "wb");
  if (f) {
    fputs("GGUF but not really a model file", f);
    fclose(f);
  }
  CHECK_FAILS(vq_model_load(path, &model), VQ_ERR_DATA, path);
  unlink(path);
  CHECK(model == NULL);
  CHECK_OK(vq_model_load(model_path, &model));
  if (!model) return;
  vq_model_info info;
  CHECK_OK(vq_model_get_info(model, &info));
  CHECK(strcmp(info.arch, "gemma3") == 0 && info.n_vocab > 1000 && info.head_dim > 0);

  const char* text = "The capital of France is";
  int32_t ids[64];
  size_t n = 0;
  CHECK_FAILS(vq_tokenize(model, text, strlen(text), 1, 1, ids, 2, &n), VQ_ERR_BUFFER_TOO_SMALL, "needs room");
  CHECK(n > 2);
  CHECK_OK(vq_tokenize(model, text, strlen(text), 1, 1, ids, 64, &n));
  CHECK(n > 2 && n <= strlen(text) + 2 && ids[0] == info.bos);
  char back[256];
  size_t len = 0;
  CHECK_OK(vq_detokenize(model, ids + 1, n - 1, 0, back, sizeof back, &len));
  CHECK(len == strlen(text) && strcmp(back, text) == 0);
  const int32_t bad_id = info.n_vocab;
  CHECK_FAILS(vq_detokenize(model, &bad_id, 1, 0, back, sizeof back, &len), VQ_ERR_INVALID_ARGUMENT, "vocabulary");
  CHECK(vq_token_is_eog(model, info.eos) == 1 && vq_token_is_eog(model, ids[1]) == 0);

  /* Chat: the model's template (Gemma's), a named one, and errors. */
  const char* roles[2] = {"user", "assistant"};
  const char* contents[2] = {"Hi", "Hello!"};
  char chat[512];
  CHECK_OK(vq_chat_format(model, NULL, roles, contents, 1, 1, chat, sizeof chat, &len));
  CHECK(strcmp(chat, "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n") == 0);
  CHECK_OK(vq_chat_format(model, "chatml", roles, contents, 2, 0, chat, sizeof chat, &len));
  CHECK(strstr(chat, "<|im_start|>assistant\nHello!<|im_end|>") != NULL);
  CHECK_FAILS(vq_chat_format(model, NULL, roles, contents, 2, 1, chat, 8, &len), VQ_ERR_BUFFER_TOO_SMALL, "room");
  CHECK(len > 8);
  CHECK_FAILS(vq_chat_format(model, "nosuch", roles, contents, 1, 1, chat, sizeof chat, &len), VQ_ERR_INVALID_ARGUMENT,
              "nosuch");
  CHECK_FAILS(vq_chat_format(model, NULL, NULL, contents, 1, 1, chat, sizeof chat, &len), VQ_ERR_INVALID_ARGUMENT,
              "roles is NULL");
  CHECK_OK(vq_chat_turn_end(model, NULL, chat, sizeof chat, &len));
  CHECK(strcmp(chat, "<end_of_turn>\n") == 0);

  vq_session_config sc;
  vq_session_config_init(&sc);
  vq_session* session = NULL;
  sc.kv_spec = "kivi:kbits=9";
  CHECK_FAILS(vq_session_create(model, &sc, &session), VQ_ERR_INVALID_ARGUMENT, "kbits");
  sc.kv_spec = "kivi";
  sc.n_ctx = info.n_ctx_train + 1;
  CHECK_FAILS(vq_session_create(model, &sc, &session), VQ_ERR_INVALID_ARGUMENT, "context length");
  sc.n_ctx = 256;
  sc.kv_budget = 1024;
  CHECK_FAILS(vq_session_create(model, &sc, &session), VQ_ERR_INVALID_ARGUMENT, "budget");
  sc.kv_budget = 0;
  CHECK_OK(vq_session_create(model, &sc, &session));
  if (!session) {
    vq_model_free(model);
    return;
  }
  CHECK(strcmp(vq_session_kv_spec(session), "kivi") == 0);
  const float* logits = NULL;
  int32_t n_vocab = 0;
  CHECK_FAILS(vq_session_logits(session, &logits, &n_vocab), VQ_ERR_INVALID_ARGUMENT, "feed tokens first");
  CHECK_FAILS(vq_session_feed(session, &bad_id, 1), VQ_ERR_INVALID_ARGUMENT, "vocabulary");
  CHECK_OK(vq_session_feed(session, ids, n));
  CHECK_OK(vq_session_logits(session, &logits, &n_vocab));
  CHECK(n_vocab == info.n_vocab);
  int32_t best = 0;
  for (int32_t i = 1; i < n_vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  vq_sampler_config spc;
  vq_sampler_config_init(&spc);
  CHECK(spc.temperature == 0.0f && spc.top_k == 40);
  vq_sampler* sampler = NULL;
  spc.top_p = 2.0f;
  CHECK_FAILS(vq_sampler_create(&spc, &sampler), VQ_ERR_INVALID_ARGUMENT, "top_p 2");
  spc.top_p = 0.95f;
  CHECK_OK(vq_sampler_create(&spc, &sampler));
  int32_t tok = -1;
  CHECK_OK(vq_sampler_sample(sampler, logits, n_vocab, &tok));
  CHECK(tok == best);
  int done = 0;
  const char* piece = NULL;
  size_t piece_len = 0;
  int steps = 0;
  for (; steps < 6 && !done; ++steps) {
    CHECK_OK(vq_session_generate_step(session, sampler, &tok, &piece, &piece_len, &done));
    if (steps == 0) CHECK(tok == best);
  }
  int64_t n_past = 0, n_ctx = 0;
  CHECK_OK(vq_session_position(session, &n_past, &n_ctx));
  CHECK(n_past == (int64_t)n + steps && n_ctx == 256);
  vq_memory mem;
  CHECK_OK(vq_session_memory(session, &mem));
  CHECK(mem.total_bytes > 0);
  CHECK_FAILS(vq_session_generate_step(session, NULL, &tok, NULL, NULL, &done), VQ_ERR_INVALID_ARGUMENT,
              "sampler is NULL");
  static int32_t many[300];
  for (int i = 0; i < 300; ++i) many[i] = ids[1];
  CHECK_FAILS(vq_session_feed(session, many, 300), VQ_ERR_INVALID_ARGUMENT, "256");
  CHECK_OK(vq_session_clear(session));
  CHECK_OK(vq_session_position(session, &n_past, NULL));
  CHECK(n_past == 0);
  vq_sampler_free(sampler);
  vq_session_free(session);

  /* Perplexity over a short text, chunks of 64 tokens; kivi is scored against fp16. */
  static char ptext[8192];
  ptext[0] = '\0';
  for (int i = 0; i < 12; ++i) strcat(ptext, "The river flows past the old mill, and the miller counts his sacks of grain. ");
  vq_perplexity_config pc;
  vq_perplexity_config_init(&pc);
  pc.kv_spec = "kivi:residual=16";
  pc.n_ctx = 64;
  pc.n_chunks = 2;
  pc.kv_budget = 0;
  vq_perplexity_result r;
  CHECK_OK(vq_perplexity(model, ptext, strlen(ptext), &pc, &r));
  CHECK(r.chunks == 2 && r.ctx == 64 && r.tokens_scored == 2 * 31 && r.compared == 1);
  CHECK(r.ppl > 1.0 && isfinite(r.ppl) && r.ppl_fp16 > 1.0 && r.top1_agreement > 0.5 && r.kl_mean >= 0);
  vq_method* km = NULL;
  double kbits = 0;
  CHECK_OK(vq_method_parse(pc.kv_spec, &km));
  CHECK_OK(vq_method_bits(km, info.head_dim, &kbits, NULL, NULL));
  vq_method_free(km);
  CHECK(r.kv_window_tokens == 16 && r.kv_bits_per_element == kbits);
  double counted = 0;
  CHECK_OK(vq_perplexity_bits_counted(&r, &counted));
  CHECK(fabs(counted - ((64.0 - 16 - r.kv_sink_tokens) * kbits + (16.0 + r.kv_sink_tokens) * 16) / 64) < 1e-12);
  CHECK_FAILS(vq_perplexity_bits_counted(NULL, &counted), VQ_ERR_INVALID_ARGUMENT, "result is NULL");
  pc.n_ctx = 4096;
  CHECK_FAILS(vq_perplexity(model, ptext, strlen(ptext), &pc, &r), VQ_ERR_INVALID_ARGUMENT, "fewer than one chunk");
  CHECK_FAILS(vq_perplexity(model, NULL, 10, &pc, &r), VQ_ERR_INVALID_ARGUMENT, "text is NULL");
  vq_model_free(model);
  vq_model_free(NULL);
}

/* Every bad_*.gguf of the corpus is refused as bad data naming the file; the tiny valid one loads
 * and generates. */
static void test_gguf_corpus(const char* dir) {
  DIR* d = opendir(dir);
  CHECK(d != NULL);
  if (!d) return;
  int refused = 0;
  char path[1024];
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (strncmp(e->d_name, "bad_", 4) != 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    vq_model* model = (vq_model*)1;
    CHECK_FAILS(vq_model_load(path, &model), VQ_ERR_DATA, path);
    CHECK(model == NULL);
    ++refused;
  }
  closedir(d);
  CHECK(refused >= 30);
  snprintf(path, sizeof path, "%s/ok_tiny_llama.gguf", dir);
  vq_model* model = NULL;
  CHECK_OK(vq_model_load(path, &model));
  vq_session_config sc;
  vq_session_config_init(&sc);
  sc.n_ctx = 32;
  sc.kv_spec = "q4";
  vq_session* session = NULL;
  if (model) CHECK_OK(vq_session_create(model, &sc, &session));
  if (session) {
    const int32_t ids[2] = {1, 2};
    CHECK_OK(vq_session_feed(session, ids, 2));
    vq_sampler_config spc;
    vq_sampler_config_init(&spc);
    spc.temperature = 0.8f;
    vq_sampler* sampler = NULL;
    CHECK_OK(vq_sampler_create(&spc, &sampler));
    int done = 0;
    int32_t tok;
    for (int i = 0; i < 40 && !done; ++i) CHECK_OK(vq_session_generate_step(session, sampler, &tok, NULL, NULL, &done));
    vq_sampler_free(sampler);
  }
  vq_session_free(session);
  vq_model_free(model);
}

int main(int argc, char** argv) {
  test_basics();
  test_methods();
  test_cache_methods();
  test_cache_errors();
  if (argc > 1) test_model(argv[1]);
  if (argc > 2) test_gguf_corpus(argv[2]);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("capi_test: all checks passed%s\n", argc > 1 ? " (with the model)" : "");
  return 0;
}
