#!/usr/bin/env python3
"""Writes the malformed-GGUF corpus: one small valid llama-architecture model (ok_tiny_llama.gguf,
which loads and generates) and bad_*.gguf files that each break one thing in it. Every bad file
must be refused with exit status 1 and a one-line message (tests/cli/gguf_corpus.sh, and the
engine test GgufCorpus under ASan/UBSan).

    python3 tests/data/gguf_corpus/make_corpus.py tests/data/gguf_corpus

The files are committed; this script is how they were made (deterministic: no randomness)."""
import math
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
T_F32, T_F16 = 0, 1
E, H, HKV, FF, L = 8, 2, 1, 16, 1
D = E // H


def s(x):
    b = x if isinstance(x, bytes) else x.encode()
    return struct.pack("<Q", len(b)) + b


def scalar(t, v):
    fmt = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
           U64: "<Q", I64: "<q", F64: "<d"}
    return s(v) if t == STR else struct.pack(fmt[t], v)


def kv(key, t, v, elem=None):
    out = s(key) + struct.pack("<I", t)
    if t == ARR:
        out += struct.pack("<IQ", elem, len(v)) + b"".join(scalar(elem, x) for x in v)
    else:
        out += scalar(t, v)
    return out


def vocab():
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + ["\u2581", "a", "b", "\u2581a", "ab"]
    types = [2, 3, 3] + [6] * 256 + [1] * 5
    return toks, types


def det(n, seed):
    """Deterministic small weights."""
    return [math.sin(seed * 12.9898 + i * 78.233) * 0.3 for i in range(n)]


def f32(vals):
    return struct.pack("<%df" % len(vals), *vals)


def base_meta():
    toks, types = vocab()
    return [
        kv("general.architecture", STR, "llama"),
        kv("llama.block_count", U32, L),
        kv("llama.embedding_length", U32, E),
        kv("llama.feed_forward_length", U32, FF),
        kv("llama.attention.head_count", U32, H),
        kv("llama.attention.head_count_kv", U32, HKV),
        kv("llama.context_length", U32, 64),
        kv("llama.rope.freq_base", F32, 10000.0),
        kv("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        kv("tokenizer.ggml.model", STR, "llama"),
        kv("tokenizer.ggml.tokens", ARR, toks, STR),
        kv("tokenizer.ggml.scores", ARR, [-float(i) for i in range(len(toks))], F32),
        kv("tokenizer.ggml.token_type", ARR, types, I32),
        kv("tokenizer.ggml.bos_token_id", U32, 1),
        kv("tokenizer.ggml.eos_token_id", U32, 2),
    ]


def base_tensors():
    n_vocab = len(vocab()[0])
    t = [("token_embd.weight", [E, n_vocab], T_F32, f32(det(E * n_vocab, 1))),
         ("output_norm.weight", [E], T_F32, f32([1.0] * E))]
    p = "blk.0."
    t += [(p + "attn_norm.weight", [E], T_F32, f32([1.0] * E)),
          (p + "ffn_norm.weight", [E], T_F32, f32([1.0] * E)),
          (p + "attn_q.weight", [E, H * D], T_F32, f32(det(E * H * D, 2))),
          (p + "attn_k.weight", [E, HKV * D], T_F32, f32(det(E * HKV * D, 3))),
          (p + "attn_v.weight", [E, HKV * D], T_F32, f32(det(E * HKV * D, 4))),
          (p + "attn_output.weight", [H * D, E], T_F32, f32(det(E * H * D, 5))),
          (p + "ffn_gate.weight", [E, FF], T_F32, f32(det(E * FF, 6))),
          (p + "ffn_up.weight", [E, FF], T_F32, f32(det(E * FF, 7))),
          (p + "ffn_down.weight", [FF, E], T_F32, f32(det(E * FF, 8)))]
    return t


def build(meta=None, tensors=None, version=3, align=32, n_tensors=None, n_kv=None, offsets=None):
    meta = base_meta() if meta is None else meta
    tensors = base_tensors() if tensors is None else tensors
    infos, data = b"", b""
    for i, (name, dims, typ, raw) in enumerate(tensors):
        while len(data) % align:
            data += b"\0"
        off = len(data) if offsets is None or i not in offsets else offsets[i]
        infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", typ, off)
        data += raw
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                len(meta) if n_kv is None else n_kv)
    out += b"".join(meta) + infos
    while len(out) % align:
        out += b"\0"
    return out + data


def replace_meta(key, new):
    m = base_meta()
    i = [j for j, e in enumerate(m) if e[8:8 + len(key)] == key.encode() and len(e) > 8 + len(key)
         and struct.unpack("<Q", e[:8])[0] == len(key)][0]
    if new is None:
        del m[i]
    else:
        m[i] = new
    return m


def replace_tensor(name, new):
    t = base_tensors()
    i = [j for j, e in enumerate(t) if e[0] == name][0]
    if new is None:
        del t[i]
    else:
        t[i] = new
    return t


def corpus():
    good = build()
    header = 24
    meta_end = header + sum(len(e) for e in base_meta())
    c = {}
    c["ok_tiny_llama"] = good
    # Structure of the file.
    c["bad_empty"] = b""
    c["bad_magic"] = b"GGUX" + good[4:]
    c["bad_version_1"] = good[:4] + struct.pack("<I", 1) + good[8:]
    c["bad_version_99"] = good[:4] + struct.pack("<I", 99) + good[8:]
    c["bad_trunc_header"] = good[:13]
    c["bad_trunc_metadata"] = good[:header + 200]
    c["bad_trunc_tensor_infos"] = good[:meta_end + 40]
    c["bad_trunc_data"] = good[:len(good) - 9]
    c["bad_huge_tensor_count"] = build(n_tensors=1 << 60)
    c["bad_huge_kv_count"] = build(n_kv=1 << 60)
    c["bad_extra_kv_count"] = build(n_kv=len(base_meta()) + 1)
    c["bad_huge_key_length"] = good[:header] + struct.pack("<Q", 1 << 62) + good[header + 8:]
    c["bad_huge_string_length"] = build(meta=replace_meta(
        "general.architecture", s("general.architecture") + struct.pack("<IQ", STR, 1 << 61) + b"llama"))
    c["bad_huge_array_count"] = build(meta=replace_meta(
        "tokenizer.ggml.scores", s("tokenizer.ggml.scores") + struct.pack("<IIQ", ARR, F32, 1 << 60) + b"\0" * 64))
    c["bad_unknown_value_type"] = build(meta=replace_meta(
        "llama.context_length", s("llama.context_length") + struct.pack("<II", 99, 64)))
    c["bad_unknown_array_type"] = build(meta=replace_meta(
        "tokenizer.ggml.token_type", s("tokenizer.ggml.token_type") + struct.pack("<IIQ", ARR, 42, 1) + b"\0" * 8))
    c["bad_bool_value"] = build(meta=base_meta() + [s("tokenizer.ggml.add_bos_token") + struct.pack("<IB", BOOL, 7)])
    c["bad_alignment_not_pow2"] = build(meta=base_meta() + [kv("general.alignment", U32, 3)])
    c["bad_alignment_zero"] = build(meta=base_meta() + [kv("general.alignment", U32, 0)])
    c["bad_duplicate_key"] = build(meta=base_meta() + [kv("llama.block_count", U32, 1)])
    # Tensors.
    emb = base_tensors()[0]
    c["bad_tensor_unknown_type"] = build(tensors=replace_tensor("token_embd.weight", (emb[0], emb[1], 77, emb[3])))
    c["bad_tensor_zero_dim"] = build(tensors=replace_tensor("output_norm.weight", ("output_norm.weight", [0], T_F32, b"")))
    c["bad_tensor_five_dims"] = build(tensors=replace_tensor(
        "output_norm.weight", ("output_norm.weight", [E, 1, 1, 1, 1], T_F32, f32([1.0] * E))))
    c["bad_tensor_data_past_end"] = build(offsets={10: 1 << 20})
    c["bad_tensor_offset_overflow"] = build(offsets={10: (1 << 64) - 32})
    c["bad_tensor_dims_overflow"] = build(tensors=replace_tensor(
        "output_norm.weight", ("output_norm.weight", [1 << 40, 1 << 40], T_F32, f32([1.0] * E))))
    c["bad_tensor_overlap"] = build(offsets={3: 0})
    c["bad_tensor_misaligned"] = build(offsets={3: 8 * 1075 + 4})
    c["bad_tensor_duplicate_name"] = build(tensors=base_tensors() + [("output_norm.weight", [E], T_F32, f32([1.0] * E))])
    c["bad_tensor_name_huge"] = build(tensors=replace_tensor(
        "blk.0.ffn_down.weight", (b"x" * 70000, [FF, E], T_F32, f32(det(E * FF, 8)))))
    # The model on top of a well-formed file.
    c["bad_arch_unknown"] = build(meta=replace_meta("general.architecture", kv("general.architecture", STR, "gpt2")))
    c["bad_arch_missing"] = build(meta=replace_meta("general.architecture", None))
    c["bad_arch_not_string"] = build(meta=replace_meta("general.architecture", kv("general.architecture", U32, 7)))
    c["bad_block_count_huge"] = build(meta=replace_meta("llama.block_count", kv("llama.block_count", U32, 1 << 30)))
    c["bad_block_count_zero"] = build(meta=replace_meta("llama.block_count", kv("llama.block_count", U32, 0)))
    c["bad_head_count_zero"] = build(meta=replace_meta("llama.attention.head_count", kv("llama.attention.head_count", U32, 0)))
    c["bad_head_count_kv_zero"] = build(meta=replace_meta(
        "llama.attention.head_count_kv", kv("llama.attention.head_count_kv", U32, 0)))
    c["bad_head_count_kv_not_divisor"] = build(meta=replace_meta(
        "llama.attention.head_count_kv", kv("llama.attention.head_count_kv", U32, 3)))
    c["bad_embedding_length_negative"] = build(meta=replace_meta(
        "llama.embedding_length", kv("llama.embedding_length", I32, -8)))
    c["bad_context_length_zero"] = build(meta=replace_meta("llama.context_length", kv("llama.context_length", U32, 0)))
    c["bad_missing_tensor"] = build(tensors=replace_tensor("blk.0.attn_k.weight", None))
    c["bad_tensor_wrong_shape"] = build(tensors=replace_tensor(
        "blk.0.attn_q.weight", ("blk.0.attn_q.weight", [E, 4], T_F32, f32(det(E * 4, 2)))))
    c["bad_norm_not_f32"] = build(tensors=replace_tensor(
        "output_norm.weight", ("output_norm.weight", [E], T_F16, b"\0\x3c" * E)))
    c["bad_vocab_embedding_mismatch"] = build(tensors=replace_tensor(
        "token_embd.weight", ("token_embd.weight", [E, 100], T_F32, f32(det(E * 100, 1)))))
    c["bad_tokenizer_model"] = build(meta=replace_meta("tokenizer.ggml.model", kv("tokenizer.ggml.model", STR, "gpt2")))
    c["bad_tokens_not_strings"] = build(meta=replace_meta(
        "tokenizer.ggml.tokens", kv("tokenizer.ggml.tokens", ARR, [1, 2, 3], I32)))
    c["bad_scores_count"] = build(meta=replace_meta(
        "tokenizer.ggml.scores", kv("tokenizer.ggml.scores", ARR, [0.0] * 5, F32)))
    c["bad_bos_out_of_range"] = build(meta=replace_meta(
        "tokenizer.ggml.bos_token_id", kv("tokenizer.ggml.bos_token_id", U32, 100000)))
    c["bad_tensor_nan_norm"] = build(tensors=replace_tensor(
        "output_norm.weight", ("output_norm.weight", [E], T_F32, f32([float("nan")] * E))))
    return c


def main():
    out = sys.argv[1]
    for name, data in sorted(corpus().items()):
        with open(os.path.join(out, name + ".gguf"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
