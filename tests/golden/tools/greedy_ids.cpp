// Minimal greedy generator printing token ids (oracle helper, lives outside the project).
// usage: greedy_ids MODEL N_PREDICT FA(on|off|auto) N_THREADS PROMPT [LOGITS0_OUT.f32|-] [KV(f16|f32|bf16|q8_0) or K,V e.g. f16,f32]
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>

static std::string piece(const llama_vocab * v, llama_token t) {
    char buf[512];
    int n = llama_token_to_piece(v, t, buf, sizeof(buf), 0, true);
    return n < 0 ? std::string() : std::string(buf, n);
}
static void json_str(const std::string & s) {
    putchar('"');
    for (unsigned char c : s) {
        if (c == '"') printf("\\\""); else if (c == '\\') printf("\\\\");
        else if (c == '\n') printf("\\n"); else if (c == '\t') printf("\\t"); else if (c == '\r') printf("\\r");
        else if (c < 0x20) printf("\\u%04x", c); else putchar(c);
    }
    putchar('"');
}
int main(int argc, char ** argv) {
    if (argc < 6) { fprintf(stderr, "usage\n"); return 1; }
    const char * mpath = argv[1]; int n_predict = atoi(argv[2]); std::string fa = argv[3];
    int nt = atoi(argv[4]); std::string prompt = argv[5]; const char * lout = argc > 6 && std::string(argv[6]) != "-" ? argv[6] : nullptr;
    std::string kv = argc > 7 ? argv[7] : "f16";
    auto pt = [](const std::string & t) { return t == "f32" ? GGML_TYPE_F32 : t == "bf16" ? GGML_TYPE_BF16 : t == "q8_0" ? GGML_TYPE_Q8_0 : GGML_TYPE_F16; };
    std::string kvk = kv, kvv = kv; { auto c = kv.find(','); if (c != std::string::npos) { kvk = kv.substr(0, c); kvv = kv.substr(c + 1); } }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    ggml_backend_load_all();
    auto mp = llama_model_default_params(); mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(mpath, mp);
    if (!model) return 2;
    const llama_vocab * vocab = llama_model_get_vocab(model);
    int n = -llama_tokenize(vocab, prompt.c_str(), prompt.size(), NULL, 0, true, true);
    std::vector<llama_token> toks(n);
    llama_tokenize(vocab, prompt.c_str(), prompt.size(), toks.data(), n, true, true);
    auto cp = llama_context_default_params();
    cp.n_ctx = 512; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_threads = nt; cp.n_threads_batch = nt; cp.no_perf = true;
    cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.type_k = pt(kvk); cp.type_v = pt(kvv);
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) return 3;
    const int nv = llama_vocab_n_tokens(vocab);
    printf("{\"prompt\": "); json_str(prompt);
    printf(", \"flash_attn\": \"%s\", \"n_threads\": %d, \"n_ctx\": %u, \"type_k\": \"%s\", \"type_v\": \"%s\", \"prompt_ids\": [", fa.c_str(), nt, llama_n_ctx(ctx), kvk.c_str(), kvv.c_str());
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", toks[i]);
    printf("], \"steps\": [\n");
    llama_batch b = llama_batch_get_one(toks.data(), n);
    std::vector<llama_token> gen; std::string text; int first_eog = -1;
    llama_token cur;
    for (int step = 0; step < n_predict; step++) {
        if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 4; }
        const float * lg = llama_get_logits_ith(ctx, -1);
        if (step == 0 && lout) { FILE * f = fopen(lout, "wb"); fwrite(lg, sizeof(float), nv, f); fclose(f); }
        std::vector<int> idx(nv); for (int i = 0; i < nv; i++) idx[i] = i;
        std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(), [&](int a, int c){ return lg[a] > lg[c] || (lg[a] == lg[c] && a < c); });
        cur = idx[0];
        if (first_eog < 0 && llama_vocab_is_eog(vocab, cur)) first_eog = step;
        std::string p = piece(vocab, cur);
        printf("  {\"id\": %d, \"piece\": ", cur); json_str(p); printf(", \"piece_hex\": \"");
        for (unsigned char c : p) printf("%02x", c);
        printf("\", \"top5\": [");
        for (int k = 0; k < 5; k++) printf(k ? ", [%d, %.6f]" : "[%d, %.6f]", idx[k], lg[idx[k]]);
        printf("]}%s\n", step + 1 < n_predict ? "," : "");
        gen.push_back(cur); text += p;
        b = llama_batch_get_one(&cur, 1);
    }
    printf("], \"generated_ids\": [");
    for (size_t i = 0; i < gen.size(); i++) printf(i ? ", %d" : "%d", gen[i]);
    printf("], \"first_eog_step\": %d, \"text\": ", first_eog); json_str(text); printf("}\n");
    llama_free(ctx); llama_model_free(model);
    return 0;
}
