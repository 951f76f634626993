/* VeloxQuant's C API: compressed KV caches on their own, and GGUF models that generate with them.
 *
 * Stable and plain C, for C programs and for bindings (Python, ...). Every object is an opaque
 * handle made by a *_create / *_load call and released by its *_free call (free(NULL) is a no-op).
 * Every call that can fail returns a vq_status; on failure vq_last_error() gives a one-line
 * message naming what was wrong (the spec key, the file, the shape). No C++ exception crosses
 * this boundary, and bad input (null pointers, wrong shapes, bad specs, damaged files) is refused
 * with an error, never a crash.
 *
 * Arrays are row-major and contiguous, with their shape passed explicitly:
 *   keys, values:  [n_tokens][n_kv_heads][head_dim]
 *   queries, outs: [n_q][n_heads][head_dim]   (n_heads a multiple of n_kv_heads: GQA)
 * A handle may be used from one thread at a time; different handles from different threads.
 * The compute calls use the library's thread pool (vq_set_threads). */
#ifndef VELOXQUANT_VELOXQUANT_H
#define VELOXQUANT_VELOXQUANT_H

#include <stddef.h>
#include <stdint.h>

#if defined(VQ_BUILDING_LIBRARY)
#define VQ_API __attribute__((visibility("default")))
#else
#define VQ_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vq_status {
  VQ_OK = 0,
  VQ_ERR_INVALID_ARGUMENT = 1, /* a null pointer, a wrong shape, a bad spec or option */
  VQ_ERR_IO = 2,               /* a file cannot be opened, read or written */
  VQ_ERR_DATA = 3,             /* a file is damaged, of another kind, or made for something else */
  VQ_ERR_BUFFER_TOO_SMALL = 4, /* the output buffer is too small; the size needed was written */
  VQ_ERR_OUT_OF_MEMORY = 5,
  VQ_ERR_INTERNAL = 6 /* a bug in the library */
} vq_status;

/* The library's version, "MAJOR.MINOR.PATCH". */
VQ_API const char* vq_version(void);
/* The message of the last failed call on this thread ("" if none). Valid until the thread's next
 * failing call. */
VQ_API const char* vq_last_error(void);
/* "ok", "invalid argument", ... for a vq_status ("unknown status" for any other value). */
VQ_API const char* vq_status_name(int status);
/* Threads for compute (n <= 0: OpenMP's default); returns the count now in use. */
VQ_API int vq_set_threads(int n);

/* ---- Methods ---------------------------------------------------------------------------- */

typedef enum vq_param_type { VQ_PARAM_INT = 0, VQ_PARAM_FLOAT = 1, VQ_PARAM_BOOL = 2, VQ_PARAM_CHOICE = 3 } vq_param_type;

typedef struct vq_method_param {
  const char* name;
  const char* help;
  vq_param_type type;
  double default_value, min, max; /* CHOICE: the index of the choice */
} vq_method_param;

/* The registered methods, in registry order (as `veloxquant methods` lists them). Strings are
 * static. */
VQ_API int vq_method_count(void);
VQ_API vq_status vq_method_name(int index, const char** name, const char** summary);
VQ_API vq_status vq_method_param_count(int index, int* count);
VQ_API vq_status vq_method_param_info(int index, int param, vq_method_param* out);

/* A parsed spec ("kivi:kbits=2", "k=q8,v=q4"). */
typedef struct vq_method vq_method;
VQ_API vq_status vq_method_parse(const char* spec, vq_method** out);
VQ_API void vq_method_free(vq_method* method);
/* The canonical spec (parameters at their defaults omitted); owned by the handle. */
VQ_API const char* vq_method_spec(const vq_method* method);
/* Bits per element of compressed tokens at this head dimension: the average of keys and values,
 * and each side. Any output may be NULL. */
VQ_API vq_status vq_method_bits(const vq_method* method, int head_dim, double* bits_per_element, double* key_bits,
                                double* value_bits);
/* 1 if the method needs a calibration file (`veloxquant calibrate`), else 0 (also for NULL). */
/* Bits per element everything counted when a sequence holds ctx tokens (ctx >= 1): the compressed
 * tokens at vq_method_bits's figure, the fp16 sinks and window at 16 bits, as their share of ctx
 * (all of them fp16 when ctx is at most those tokens). */
VQ_API vq_status vq_method_bits_counted(const vq_method* method, int head_dim, int64_t ctx, double* bits);
VQ_API int vq_method_needs_calibration(const vq_method* method);
/* fp16 residual-window tokens (the larger of keys' and values') and fp16 sink tokens. */
VQ_API vq_status vq_method_window(const vq_method* method, int* window_tokens, int* sink_tokens);

/* ---- A KV cache on its own --------------------------------------------------------------- */

typedef enum vq_rope_style { VQ_ROPE_NONE = 0, VQ_ROPE_NEOX = 1, VQ_ROPE_NORM = 2 } vq_rope_style;

typedef struct vq_cache_config {
  const char* spec;               /* method spec; required */
  int32_t n_layers;               /* >= 1 */
  int32_t n_kv_heads;             /* >= 1 */
  int32_t head_dim;               /* >= 1 (the method may need more, e.g. a power of two) */
  const int32_t* sliding_window;  /* n_layers entries (0: the whole context), or NULL: none */
  const char* calib_path;         /* calibration file for a method that needs one, or NULL */
  /* The rotary embedding the appended keys carry, for methods that store keys before RoPE
   * (kvquant, commvq); NONE for the others. */
  int32_t rope_style;   /* a vq_rope_style (an int: any value a caller passes is checked) */
  float rope_base;       /* default 10000 */
  float rope_freq_scale; /* default 1 */
  float logit_softcap;   /* scores s -> c*tanh(s/c) before the softmax; 0: off */
} vq_cache_config;

typedef struct vq_memory {
  uint64_t total_bytes;  /* the sum of the four below: bytes actually allocated */
  uint64_t block_bytes;  /* compressed pages */
  uint64_t window_bytes; /* fp16 residual windows */
  uint64_t sink_bytes;   /* fp16 sink tokens */
  uint64_t param_bytes;  /* codec state (rotations, codebooks) */
  int64_t key_elements_compressed, value_elements_compressed, elements_retained;
} vq_memory;

typedef struct vq_cache vq_cache;

/* Fills *config with the defaults (no spec, no layers, no RoPE, base 10000, scale 1). */
VQ_API void vq_cache_config_init(vq_cache_config* config);
VQ_API vq_status vq_cache_create(const vq_cache_config* config, vq_cache** out);
VQ_API void vq_cache_free(vq_cache* cache);
/* The canonical spec of the cache's method; owned by the handle. */
VQ_API const char* vq_cache_spec(const vq_cache* cache);
VQ_API vq_status vq_cache_shape(const vq_cache* cache, int32_t* n_layers, int32_t* n_kv_heads, int32_t* head_dim);

/* Appends n_tokens tokens to `layer` at positions n .. n+n_tokens-1 (n: the tokens it holds).
 * k and v are [n_tokens][n_kv_heads][head_dim]; the shape given must be the cache's. */
VQ_API vq_status vq_cache_append_f32(vq_cache* cache, int32_t layer, const float* k, const float* v, int64_t n_tokens,
                                     int32_t n_kv_heads, int32_t head_dim);
/* The same from IEEE half-precision bit patterns. */
VQ_API vq_status vq_cache_append_f16(vq_cache* cache, int32_t layer, const uint16_t* k, const uint16_t* v,
                                     int64_t n_tokens, int32_t n_kv_heads, int32_t head_dim);
VQ_API vq_status vq_cache_n_tokens(const vq_cache* cache, int32_t layer, int64_t* n_tokens);

/* Attention of n_q query tokens over `layer` as stored, read from the packed codes. q and out are
 * [n_q][n_heads][head_dim]; query token i sits at positions[i] and sees positions p <= positions[i]
 * (and p > positions[i] - window on a sliding-window layer); positions NULL means the newest n_q
 * positions (n-n_q .. n-1). Every position must be in [0, n-1], and on a sliding-window layer not
 * older than the first token of the last append. scale <= 0 means 1/sqrt(head_dim). Query head h
 * reads KV head h / (n_heads / n_kv_heads). */
VQ_API vq_status vq_cache_attend(const vq_cache* cache, int32_t layer, const float* q, int64_t n_q, int32_t n_heads,
                                 int32_t head_dim, const int64_t* positions, float scale, float* out);
/* The same attention computed the plain way (every block decoded, a double-precision softmax):
 * the oracle the fused path is tested against. */
VQ_API vq_status vq_cache_attend_reference(const vq_cache* cache, int32_t layer, const float* q, int64_t n_q,
                                           int32_t n_heads, int32_t head_dim, const int64_t* positions, float scale,
                                           float* out);
/* Bytes allocated by all layers (layer < 0) or one layer. */
VQ_API vq_status vq_cache_memory(const vq_cache* cache, int32_t layer, vq_memory* out);
VQ_API vq_status vq_cache_clear(vq_cache* cache);
/* Saves the cache as stored (codes, parameters, fp16 windows and sinks, positions) with its
 * method and configuration, in a checksummed file written through a temporary file. */
VQ_API vq_status vq_cache_save(const vq_cache* cache, const char* path);
/* A new cache from a saved file; calib_path names the calibration it was saved under (NULL if its
 * method needs none). A damaged, truncated or foreign file is refused (VQ_ERR_DATA). */
VQ_API vq_status vq_cache_load(const char* path, const char* calib_path, vq_cache** out);

/* ---- Models, sessions, sampling --------------------------------------------------------- */

typedef struct vq_model vq_model;
typedef struct vq_session vq_session;
typedef struct vq_sampler vq_sampler;

typedef struct vq_model_info {
  const char* arch; /* "gemma3", "llama", ...; owned by the model */
  const char* name; /* general.name, or "" */
  int32_t n_vocab, n_layer, n_embd, n_head, n_kv_head, head_dim;
  int64_t n_ctx_train;
  int32_t bos, eos, eot; /* -1 when the vocabulary has none */
} vq_model_info;

/* Loads a GGUF file (memory-mapped). An architecture the engine does not run, or a damaged file,
 * is refused with a message naming the file. */
VQ_API vq_status vq_model_load(const char* path, vq_model** out);
VQ_API void vq_model_free(vq_model* model);
VQ_API vq_status vq_model_get_info(const vq_model* model, vq_model_info* out);

/* Text (text_len bytes) to token ids. add_special: BOS/EOS as the model adds them; parse_special:
 * control tokens written in the text become their ids. *n_tokens receives the count; if it
 * exceeds capacity nothing is written and VQ_ERR_BUFFER_TOO_SMALL is returned (text_len + 2 is
 * always enough). tokens may be NULL when capacity is 0. */
VQ_API vq_status vq_tokenize(const vq_model* model, const char* text, size_t text_len, int add_special,
                             int parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens);
/* Token ids to text (UTF-8 bytes, not NUL-terminated unless room is left: a NUL is written after
 * the text when capacity > length). special: control tokens give their text. *text_len receives
 * the length; VQ_ERR_BUFFER_TOO_SMALL as for vq_tokenize. */
VQ_API vq_status vq_detokenize(const vq_model* model, const int32_t* tokens, size_t n_tokens, int special, char* text,
                               size_t capacity, size_t* text_len);
/* 1 if the token ends generation (EOS, EOT, ...), else 0. */
VQ_API int vq_token_is_eog(const vq_model* model, int32_t token);

/* A conversation (n_messages roles and contents: "system", "user", "assistant") as prompt text in a
 * chat template, byte for byte as llama.cpp's built-in templates format it: the one named by
 * template_name ("gemma", "chatml", "llama3", ...), or the model's tokenizer.chat_template when it
 * is NULL. add_generation_prompt: end with the assistant's turn opening. Tokenize the text with
 * add_special and parse_special. Output as vq_detokenize (VQ_ERR_BUFFER_TOO_SMALL, NUL if room). */
VQ_API vq_status vq_chat_format(const vq_model* model, const char* template_name, const char* const* roles,
                                const char* const* contents, size_t n_messages, int add_generation_prompt, char* text,
                                size_t capacity, size_t* text_len);
/* What follows an assistant reply in the template (Gemma's "<end_of_turn>\n"): feed it after a
 * generated reply to continue the conversation in the same session. */
VQ_API vq_status vq_chat_turn_end(const vq_model* model, const char* template_name, char* text, size_t capacity,
                                  size_t* text_len);

#define VQ_KV_BUDGET_DEFAULT UINT64_MAX /* 80% of the memory the system reports available */

typedef struct vq_session_config {
  const char* kv_spec;    /* KV-cache method, default "fp16" (NULL: fp16) */
  const char* calib_path; /* calibration for a method that needs one (checked against the model) */
  int64_t n_ctx;          /* context size in tokens, default 4096 (at most the model's) */
  int32_t ubatch;         /* prompt micro-batch, default 512 */
  uint64_t kv_budget;     /* bytes; a cache larger at n_ctx is refused; 0: no limit; default
                             VQ_KV_BUDGET_DEFAULT */
} vq_session_config;

VQ_API void vq_session_config_init(vq_session_config* config);
/* A session keeps a pointer to the model: free the session first. */
VQ_API vq_status vq_session_create(const vq_model* model, const vq_session_config* config, vq_session** out);
VQ_API void vq_session_free(vq_session* session);
/* Feeds tokens at the current position (prefill, or one decode token). Afterwards the logits of
 * the last token fed are readable with vq_session_logits. Refuses to run past n_ctx. */
VQ_API vq_status vq_session_feed(vq_session* session, const int32_t* tokens, size_t n_tokens);
/* The logits of the last token fed (n_vocab floats), valid until the next call that feeds. */
VQ_API vq_status vq_session_logits(const vq_session* session, const float** logits, int32_t* n_vocab);
VQ_API vq_status vq_session_position(const vq_session* session, int64_t* n_past, int64_t* n_ctx);
VQ_API vq_status vq_session_memory(const vq_session* session, vq_memory* out);
/* Empties the cache (position 0). */
VQ_API vq_status vq_session_clear(vq_session* session);
/* The canonical spec of the session's cache method; owned by the session. */
VQ_API const char* vq_session_kv_spec(const vq_session* session);

typedef struct vq_sampler_config {
  float temperature; /* <= 0: greedy (default 0) */
  int32_t top_k;     /* <= 0: off (default 40) */
  float top_p;       /* >= 1: off (default 0.95) */
  float min_p;       /* <= 0: off (default 0.05) */
  uint64_t seed;     /* default 1234 */
} vq_sampler_config;

/* The CLI's defaults (`veloxquant generate`). */
VQ_API void vq_sampler_config_init(vq_sampler_config* config);
VQ_API vq_status vq_sampler_create(const vq_sampler_config* config, vq_sampler** out);
VQ_API void vq_sampler_free(vq_sampler* sampler);
/* Samples a token from n_vocab logits (top-k, top-p, min-p, temperature, as llama.cpp's order). */
VQ_API vq_status vq_sampler_sample(vq_sampler* sampler, const float* logits, int32_t n_vocab, int32_t* token);

/* One generation step, as `veloxquant generate` takes it: samples from the session's last logits;
 * unless the token ends generation it is fed (its logits become the session's) and its text is
 * returned. *token: the token sampled. *text, *text_len: the text now complete (a UTF-8 character
 * split over tokens is held back until whole; owned by the session, valid until its next call;
 * may be empty). *done: 1 when the token ends generation or the context is full (then nothing was
 * fed, and *text holds any bytes held back), else 0. Needs logits: feed the prompt first. */
VQ_API vq_status vq_session_generate_step(vq_session* session, vq_sampler* sampler, int32_t* token, const char** text,
                                          size_t* text_len, int* done);
/* The bytes the generation steps hold back (an unfinished UTF-8 character), for a caller that
 * stops before *done; empties the hold. *text is owned by the session as above. */
VQ_API vq_status vq_session_flush_text(vq_session* session, const char** text, size_t* text_len);

/* ---- Perplexity ------------------------------------------------------------------------- */

typedef struct vq_perplexity_config {
  const char* kv_spec;    /* default "fp16" */
  const char* calib_path; /* or NULL */
  int64_t n_ctx;          /* chunk size, default 512 */
  int64_t n_chunks;       /* chunks to score, < 0: all (default) */
  int32_t ubatch;         /* default 512 */
  uint64_t kv_budget;     /* as vq_session_config, default VQ_KV_BUDGET_DEFAULT */
  /* Called after each chunk (may be NULL). */
  void (*progress)(int64_t chunks_done, int64_t chunks_total, double ppl_so_far, void* user);
  void* progress_user;
} vq_perplexity_config;

/* The fields of `veloxquant perplexity --json` (the model, file and part are the caller's; kv is
 * vq_method_spec of the spec). The kl_* fields, top1_agreement and ppl_fp16 are set when
 * compared is 1 (a compressed method, scored against an fp16 pass over the same tokens). */
typedef struct vq_perplexity_result {
  int64_t ctx, chunks, tokens_scored;
  double ppl, ppl_stderr;
  double kv_bits_per_element, kv_key_bits, kv_value_bits;
  int32_t kv_window_tokens, kv_sink_tokens;
  int32_t compared;
  double kl_mean, kl_p99, top1_agreement, ppl_fp16;
} vq_perplexity_result;

VQ_API void vq_perplexity_config_init(vq_perplexity_config* config);
/* Perplexity over text (tokenized with BOS, chunked exactly as llama.cpp's llama-perplexity). */
VQ_API vq_status vq_perplexity(const vq_model* model, const char* text, size_t text_len,
                               const vq_perplexity_config* config, vq_perplexity_result* out);
/* A result's bits per element everything counted at its ctx (`perplexity --json`'s kv_bits_counted):
 * kv_bits_per_element, with kv_sink_tokens + kv_window_tokens tokens at 16 bits as their share of
 * ctx. For a calibrated method (RateQuant) this is the calibrated allocation's figure, which
 * vq_method_bits_counted on the bare spec cannot know. */
VQ_API vq_status vq_perplexity_bits_counted(const vq_perplexity_result* result, double* bits);

#ifdef __cplusplus
}
#endif

#endif /* VELOXQUANT_VELOXQUANT_H */
