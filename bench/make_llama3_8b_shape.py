#!/usr/bin/env python3
"""Write a random-weight F16 GGUF with Llama-3-8B's shape (for speed benchmarks only).

general.architecture = "llama", Llama-3-8B hyperparameters (d 4096, ffn 14336, 32 heads, 8 KV heads,
head dim 128, rope base 500000, rms eps 1e-5, ctx 8192), Llama 3.1 rope_freqs (factor 8, low 1, high 4,
original ctx 8192, computed as llama.cpp's convert_hf_to_gguf.py does), the real Llama 3 vocabulary
(all tokenizer.* keys copied from tests/data/vocab/ggml-vocab-llama-bpe.gguf), but only --layers blocks.
Weights: seeded N(0, 1/cols) in F16, norms 1 + small noise in F32. Tensors are generated and written one
at a time (about 5.3 GB for 8 layers, peak memory about 1.2 GB).

The attention-shaped file of the KV-cache benchmarks keeps Llama-3-8B's attention (32/8 heads of 128,
d 4096) but makes everything else small, so that at depth the cache, not the weights, dominates a
decode step: --ffn 256 and --byte-vocab (a 259-token SentencePiece vocabulary: <unk>, <s>, </s> and
the 256 byte tokens <0x00>..<0xFF>, which both engines tokenize by byte fallback), about 0.35 GB for
4 layers, with Llama 3.1's context of 131072 for decode at depth.

  python3 bench/make_llama3_8b_shape.py --layers 8 -o /work/bench-models/llama3-8b-shape-8l-f16.gguf
  python3 bench/make_llama3_8b_shape.py --layers 4 --ffn 256 --byte-vocab --ctx 131072 -o llama3-8b-attn-4l-f16.gguf
  llama-quantize IN.gguf OUT-q4_k_m.gguf Q4_K_M 2
"""
import argparse
import gzip
import math
import os
import shutil
import tempfile

import numpy as np
import gguf

D, FF, NH, NKV, HD, VOCAB = 4096, 14336, 32, 8, 128, 128256
BASE = 500000.0


def rope_factors(factor=8.0, low=1.0, high=4.0, old_ctx=8192):
    freqs = 1.0 / (BASE ** (np.arange(0, HD, 2, dtype=np.float32) / HD))
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / float(f)
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def copy_tokenizer(w, path):
    """Every tokenizer.* key of a vocabulary GGUF (gzip-compressed or not)."""
    with tempfile.TemporaryDirectory() as tmp:
        if path.endswith(".gz"):
            plain = os.path.join(tmp, "vocab.gguf")
            with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst)
            path = plain
        for key, f in gguf.GGUFReader(path).fields.items():
            if key.startswith("tokenizer."):
                sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
                w.add_key_value(key, f.contents(), f.types[0], sub)


def add_byte_vocab(w):
    """SentencePiece ("llama") vocabulary of <unk>, <s>, </s> and the 256 byte tokens."""
    T = gguf.TokenType
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)])
    w.add_token_scores([0.0] * 259)
    w.add_token_types([T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--ctx", type=int, default=8192, help="context length (Llama 3.1: 131072)")
    ap.add_argument("--ffn", type=int, default=FF, help="feed-forward width (Llama-3-8B: 14336)")
    ap.add_argument("--byte-vocab", action="store_true", help="a 259-token byte vocabulary instead of Llama 3's")
    ap.add_argument("--vocab", default=os.path.join(here, "../tests/data/vocab/ggml-vocab-llama-bpe.gguf.gz"))
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    ff = a.ffn
    vocab = 259 if a.byte_vocab else VOCAB

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(f"llama3-8b-shape-{a.layers}l-random")
    w.add_block_count(a.layers)
    w.add_context_length(a.ctx)
    w.add_embedding_length(D)
    w.add_feed_forward_length(ff)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_rope_freq_base(BASE)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HD)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if a.byte_vocab:
        add_byte_vocab(w)
    else:
        copy_tokenizer(w, a.vocab)

    # (name, rows, cols, kind); ggml shape is [cols, rows], numpy shape (rows, cols)
    plan = [("token_embd.weight", vocab, D, "w"), ("rope_freqs.weight", 1, HD // 2, "rope")]
    for i in range(a.layers):
        p = f"blk.{i}."
        plan += [(p + "attn_norm.weight", 1, D, "norm"), (p + "attn_q.weight", NH * HD, D, "w"),
                 (p + "attn_k.weight", NKV * HD, D, "w"), (p + "attn_v.weight", NKV * HD, D, "w"),
                 (p + "attn_output.weight", D, NH * HD, "w"), (p + "ffn_norm.weight", 1, D, "norm"),
                 (p + "ffn_gate.weight", ff, D, "w"), (p + "ffn_up.weight", ff, D, "w"),
                 (p + "ffn_down.weight", D, ff, "w")]
    plan += [("output_norm.weight", 1, D, "norm"), ("output.weight", vocab, D, "w")]

    for name, r, c, kind in plan:
        shape = (c,) if r == 1 else (r, c)
        dt = np.float16 if kind == "w" else np.float32
        w.add_tensor_info(name, shape, np.dtype(dt), r * c * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    for name, r, c, kind in plan:
        if kind == "rope":
            t = rope_factors()
        elif kind == "norm":
            t = (1.0 + 0.02 * rng.standard_normal(c, dtype=np.float32)).astype(np.float32)
        else:
            t = np.empty((r, c), dtype=np.float16)
            std = np.float32(1.0 / math.sqrt(c))
            for r0 in range(0, r, 4096):  # chunked to keep the F32 temporary small
                blk = rng.standard_normal((min(4096, r - r0), c), dtype=np.float32)
                blk *= std
                t[r0:r0 + blk.shape[0]] = blk
        w.write_tensor_data(t)
        print(f"{name:28s} {str(t.shape):16s} {t.dtype}", flush=True)
    w.close()
    print("wrote", a.out, os.path.getsize(a.out), "bytes")


if __name__ == "__main__":
    main()
