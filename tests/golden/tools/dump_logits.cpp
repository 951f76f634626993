// dump_logits: oracle helper for the golden data (own code against llama.h's public API; built beside llama.cpp, never by the project: tests/golden/arch/COMMANDS.md).
//
// usage: dump_logits MODEL TOKENS_FILE OUT.f32 FA(on|off|auto) N_THREADS [KV_TYPE | K_TYPE,V_TYPE]
//
//   TOKENS_FILE: one token id per line (blank lines ignored). The ids are fed exactly as given:
//                no BOS is added, no tokenization happens.
//   OUT.f32    : n_tokens x n_vocab float32 logits, row-major (row i = logits after position i),
//                little-endian, no header.
//   FA         : flash attention on / off / auto.
//   KV_TYPE    : optional KV-cache type name as ggml spells it (f16 default, f32, bf16, q8_0, q4_0,
//                turbo3, ...); "K,V" for different K and V types.
//
// The context has n_ctx = n_tokens rounded up to a multiple of 256, n_batch = n_ubatch = n_ctx,
// so all ids are decoded in a single llama_decode call (one ubatch) with logits for every position.
// Prints "n_tokens <N>" and "n_vocab <V>" on stdout.
#include "llama.h"
#include "ggml.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

static bool parse_type(const std::string & name, ggml_type & out) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char * tn = ggml_type_name((ggml_type) t);
        if (tn && name == tn) {
            out = (ggml_type) t;
            return true;
        }
    }
    return false;
}

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL TOKENS_FILE OUT.f32 FA(on|off|auto) N_THREADS [KV_TYPE|K,V]\n", argv[0]);
        return 1;
    }
    const std::string mpath = argv[1], tpath = argv[2], opath = argv[3], fa = argv[4];
    const int n_threads = atoi(argv[5]);
    std::string kvk = "f16", kvv = "f16";
    if (argc > 6) {
        std::string kv = argv[6];
        auto c = kv.find(',');
        if (c == std::string::npos) { kvk = kvv = kv; } else { kvk = kv.substr(0, c); kvv = kv.substr(c + 1); }
    }
    ggml_type type_k, type_v;
    if (!parse_type(kvk, type_k) || !parse_type(kvv, type_v)) {
        fprintf(stderr, "unknown KV type '%s' / '%s'\n", kvk.c_str(), kvv.c_str());
        return 1;
    }
    if (fa != "on" && fa != "off" && fa != "auto") {
        fprintf(stderr, "FA must be on, off or auto\n");
        return 1;
    }

    std::vector<llama_token> toks;
    {
        std::ifstream in(tpath);
        if (!in) { fprintf(stderr, "cannot open %s\n", tpath.c_str()); return 1; }
        std::string line;
        while (std::getline(in, line)) {
            size_t a = line.find_first_not_of(" \t\r");
            if (a == std::string::npos) continue;
            toks.push_back((llama_token) strtol(line.c_str() + a, nullptr, 10));
        }
    }
    const int n = (int) toks.size();
    if (n == 0) { fprintf(stderr, "no tokens in %s\n", tpath.c_str()); return 1; }

    llama_log_set([](ggml_log_level level, const char * text, void *) {
        if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
    }, nullptr);
    ggml_backend_load_all();

    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.progress_callback = [](float, void *) { return true; };  // no progress dots
    llama_model * model = llama_model_load_from_file(mpath.c_str(), mp);
    if (!model) { fprintf(stderr, "failed to load %s\n", mpath.c_str()); return 2; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (int i = 0; i < n; i++) {
        if (toks[i] < 0 || toks[i] >= n_vocab) {
            fprintf(stderr, "token id %d at line %d out of range [0, %d)\n", toks[i], i + 1, n_vocab);
            return 1;
        }
    }

    const uint32_t n_ctx = (uint32_t) ((n + 255) / 256 * 256);
    auto cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_ubatch = n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.no_perf = true;
    cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.type_k = type_k;
    cp.type_v = type_v;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "failed to create context\n"); return 3; }

    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = toks[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "llama_decode failed\n"); return 4; }

    FILE * f = fopen(opath.c_str(), "wb");
    if (!f) { fprintf(stderr, "cannot write %s\n", opath.c_str()); return 5; }
    for (int i = 0; i < n; i++) {
        const float * row = llama_get_logits_ith(ctx, i);
        if (!row) { fprintf(stderr, "no logits for position %d\n", i); fclose(f); return 4; }
        if (fwrite(row, sizeof(float), (size_t) n_vocab, f) != (size_t) n_vocab) { fclose(f); return 5; }
    }
    fclose(f);

    printf("n_tokens %d\nn_vocab %d\n", n, n_vocab);
    fprintf(stderr, "n_ctx %u, flash_attn %s, kv %s,%s, threads %d\n",
            llama_n_ctx(ctx), fa.c_str(), kvk.c_str(), kvv.c_str(), n_threads);

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
