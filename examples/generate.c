/* Generates a continuation of a prompt with a compressed KV cache, through the C API: what
 * `veloxquant generate -m MODEL -p PROMPT -n N --kv SPEC` prints on stdout (greedy, as its default).
 *
 *   generate MODEL PROMPT [N [KV_SPEC]]      e.g. generate gemma-3-270m-q4_k_m.gguf "Once upon a time," 32 kivi
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <veloxquant/veloxquant.h>

/* Prints the library's message and exits when a call fails. */
static void check(vq_status status, const char* what) {
  if (status != VQ_OK) {
    fprintf(stderr, "%s: %s\n", what, vq_last_error());
    exit(status == VQ_ERR_INVALID_ARGUMENT ? 2 : 1);
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL PROMPT [N [KV_SPEC]]\n", argv[0]);
    return 2;
  }
  const char* prompt = argv[2];
  const int n_predict = argc > 3 ? atoi(argv[3]) : 32;
  vq_model* model = NULL;
  check(vq_model_load(argv[1], &model), "load");

  vq_session_config sc;
  vq_session_config_init(&sc);
  sc.kv_spec = argc > 4 ? argv[4] : "kivi";
  vq_session* session = NULL;
  check(vq_session_create(model, &sc, &session), "session");

  /* The prompt as ids (with BOS); text_len + 2 ids always suffice. */
  const size_t capacity = strlen(prompt) + 2;
  int32_t* ids = malloc(capacity * sizeof *ids);
  size_t n_ids = 0;
  check(vq_tokenize(model, prompt, strlen(prompt), 1, 1, ids, capacity, &n_ids), "tokenize");
  check(vq_session_feed(session, ids, n_ids), "prefill");
  free(ids);

  vq_sampler_config spc;
  vq_sampler_config_init(&spc); /* temperature 0: greedy */
  vq_sampler* sampler = NULL;
  check(vq_sampler_create(&spc, &sampler), "sampler");

  fputs(prompt, stdout);
  int done = 0;
  for (int i = 0; i < n_predict && !done; ++i) {
    int32_t token;
    const char* text;
    size_t len;
    check(vq_session_generate_step(session, sampler, &token, &text, &len, &done), "generate");
    fwrite(text, 1, len, stdout);
    fflush(stdout);
  }
  const char* rest;
  size_t rest_len;
  check(vq_session_flush_text(session, &rest, &rest_len), "flush");
  fwrite(rest, 1, rest_len, stdout);
  printf("\n");

  vq_memory mem;
  check(vq_session_memory(session, &mem), "memory");
  fprintf(stderr, "kv cache %s: %llu bytes resident (%llu in compressed blocks, %llu fp16 window)\n",
          vq_session_kv_spec(session), (unsigned long long)mem.total_bytes, (unsigned long long)mem.block_bytes,
          (unsigned long long)mem.window_bytes);
  vq_sampler_free(sampler);
  vq_session_free(session);
  vq_model_free(model);
  return 0;
}
