#!/usr/bin/env python3
"""Build vocabulary-only GGUF files (and matching HF tokenizer.json files) for the
Llama 3 and Qwen2 byte-level BPE tokenizers from tiktoken rank files that ship on PyPI.

VeloxQuant's own script (see README.md in this folder for provenance and commands).

Inputs (tiktoken format: one "<base64 token bytes> <rank>" per line):
  * Llama 3: llama_models/llama3/tokenizer.model   from the PyPI wheel llama-models==0.3.0
  * Qwen2  : dashscope/resources/qwen.tiktoken     from the PyPI wheel dashscope==2.0.2
             (byte-identical to qwen_agent/utils/qwen.tiktoken in qwen-agent==0.0.34)

The GGUF keys follow what llama.cpp's convert_hf_to_gguf.py writes for a vocab-only
conversion (--vocab-only) of Meta-Llama-3-8B ("llama-bpe") and Qwen1.5-7B ("qwen2"),
the two models the upstream models/ggml-vocab-{llama-bpe,qwen2}.gguf were made from:

  general.architecture      llama | qwen2
  tokenizer.ggml.model      "gpt2"
  tokenizer.ggml.pre        "llama-bpe" | "qwen2"
  tokenizer.ggml.tokens     token bytes mapped through GPT-2's bytes_to_unicode table
  tokenizer.ggml.token_type NORMAL(1) for ranks, CONTROL(3) for special tokens,
                            UNUSED(5) for "[PAD<i>]" fillers up to the model's vocab_size
  tokenizer.ggml.merges     "left right" strings in rank order
  bos/eos/eot/... ids, add_bos_token, optional tokenizer.chat_template

Merges:
  * llama3: every (left, right) split of a token whose two halves are tokens themselves,
    sorted by the merged token's rank, ties by (rank(left), rank(right)) -- this is how the
    Hugging Face tiktoken converter wrote Llama 3's tokenizer.json (280,147 merges).
  * qwen2 : one merge per multi-byte token: the pair that byte-level BPE restricted to
    ranks < rank(token) ends with -- how Qwen's tokenizer.json / llama.cpp's Qwen
    converter recover the merges (151,387 merges).

Usage:
  make_vocab_gguf.py llama3 RANKS_FILE OUT.gguf [--tokenizer-json OUT.json] [--chat-template FILE]
                     [--names llama3|llama-models]
  make_vocab_gguf.py qwen2  RANKS_FILE OUT.gguf [--tokenizer-json OUT.json] [--chat-template FILE]
  make_vocab_gguf.py compare A.gguf B.gguf      # compare the tokenizer keys of two GGUFs

Requires: gguf (PyPI), numpy; tokenizers (PyPI) only for --tokenizer-json.
"""
import argparse
import base64
import sys

# ---------------------------------------------------------------- common helpers

# Pre-tokenizer regexes (as used by the original tiktoken encodings).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_UNUSED = 1, 3, 5


def byte_to_unicode_table():
    """GPT-2's reversible byte -> printable unicode character table."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE2UNI = byte_to_unicode_table()


def to_unicode(token: bytes) -> str:
    return "".join(BYTE2UNI[b] for b in token)


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            b64, rank = line.split()
            ranks[base64.b64decode(b64)] = int(rank)
    # the ranks must be 0..n-1 exactly (they become the token ids)
    assert sorted(ranks.values()) == list(range(len(ranks))), "ranks are not a permutation of 0..n-1"
    return ranks


def merges_all_pairs(ranks):
    """All valid splits of every token, ordered by the token's rank (HF tiktoken converter)."""
    out = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        local = []
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if left in ranks and right in ranks:
                local.append((ranks[left], ranks[right], rank, left, right))
        local.sort()
        out.extend(local)
    out.sort(key=lambda x: x[2])  # stable: keeps the per-token (rank(left), rank(right)) order
    return [f"{to_unicode(l)} {to_unicode(r)}" for _, _, _, l, r in out]


def bpe_split(ranks, token: bytes, max_rank: int):
    """Byte-level BPE on `token` using only merges whose result ranks below max_rank."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best = None
        best_rank = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best is None:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts


def merges_recovered(ranks):
    """One merge per multi-byte token, recovered by BPE below the token's own rank."""
    out = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = bpe_split(ranks, token, rank)
        assert len(parts) == 2, (token, parts)
        out.append(f"{to_unicode(parts[0])} {to_unicode(parts[1])}")
    return out


# ---------------------------------------------------------------- model recipes

def llama3_specials(names):
    """The 256 special tokens after the 128,000 ranks."""
    if names == "llama3":  # Meta-Llama-3-8B (the upstream ggml-vocab-llama-bpe.gguf)
        head = ["<|begin_of_text|>", "<|end_of_text|>",
                "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
                "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
                "<|start_header_id|>", "<|end_header_id|>",
                "<|reserved_special_token_4|>", "<|eot_id|>"]
        nres = 5
    else:  # "llama-models": the list in llama_models/llama3/tokenizer.py (llama-models 0.3.0,
        # Llama 3.1+ names incl. <|eom_id|>, <|python_tag|>, <|image|>)
        head = ["<|begin_of_text|>", "<|end_of_text|>",
                "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
                "<|finetune_right_pad_id|>", "<|step_id|>",
                "<|start_header_id|>", "<|end_header_id|>",
                "<|eom_id|>", "<|eot_id|>", "<|python_tag|>", "<|image|>"]
        nres = 2
    tail = [f"<|reserved_special_token_{nres + i}|>" for i in range(256 - len(head))]
    return head + tail


def build(kind, ranks_path, names="llama3"):
    ranks = load_ranks(ranks_path)
    n = len(ranks)
    id2tok = [None] * n
    for tok, r in ranks.items():
        id2tok[r] = tok
    tokens = [to_unicode(t) for t in id2tok]
    types = [TOKEN_NORMAL] * n
    meta = {}
    if kind == "llama3":
        assert n == 128000, n
        specials = llama3_specials(names)
        tokens += specials
        types += [TOKEN_CONTROL] * len(specials)
        merges = merges_all_pairs(ranks)
        sid = {t: i for i, t in enumerate(tokens) if i >= n}
        meta = dict(arch="llama", name="llama-bpe", pre="llama-bpe", pattern=LLAMA3_PATTERN,
                    bos=sid["<|begin_of_text|>"], eos=sid["<|end_of_text|>"], eot=sid["<|eot_id|>"],
                    add_bos=True, ignore_merges=True, nfc=False,
                    hparams=dict(context_length=8192, embedding_length=4096, block_count=32,
                                 feed_forward_length=14336, head_count=32, head_count_kv=8,
                                 rope_freq_base=500000.0, rms_eps=1e-5, rope_dim=128),
                    vocab_size=len(tokens))
        if names != "llama3":
            meta["eom"] = sid["<|eom_id|>"]
    elif kind == "qwen2":
        assert n == 151643, n
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tokens += specials
        types += [TOKEN_CONTROL] * len(specials)
        vocab_size = 151936  # Qwen1.5-7B / Qwen2-7B config.json vocab_size (embedding rows)
        for i in range(len(tokens), vocab_size):
            tokens.append(f"[PAD{i}]")
            types.append(TOKEN_UNUSED)
        merges = merges_recovered(ranks)
        meta = dict(arch="qwen2", name="qwen2", pre="qwen2", pattern=QWEN2_PATTERN,
                    bos=151643, eos=151643, pad=151643, eot=None,
                    add_bos=False, ignore_merges=False, nfc=True,
                    hparams=dict(context_length=32768, embedding_length=4096, block_count=32,
                                 feed_forward_length=11008, head_count=32, head_count_kv=32,
                                 rope_freq_base=1000000.0, rms_eps=1e-6, rope_dim=None),
                    vocab_size=vocab_size)
    else:
        raise SystemExit(f"unknown kind {kind}")
    return ranks, tokens, types, merges, meta


def write_gguf(path, tokens, types, merges, meta, chat_template=None):
    import gguf
    arch = meta["arch"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(meta["name"])
    hp = meta["hparams"]
    # Architecture hyper-parameters of the model the vocab comes from (llama.cpp reads
    # some of them even with vocab_only loading; harmless otherwise).
    w.add_block_count(hp["block_count"])
    w.add_context_length(hp["context_length"])
    w.add_embedding_length(hp["embedding_length"])
    w.add_feed_forward_length(hp["feed_forward_length"])
    w.add_head_count(hp["head_count"])
    w.add_head_count_kv(hp["head_count_kv"])
    w.add_rope_freq_base(hp["rope_freq_base"])
    w.add_layer_norm_rms_eps(hp["rms_eps"])
    if hp.get("rope_dim"):
        w.add_rope_dimension_count(hp["rope_dim"])
    w.add_vocab_size(meta["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(meta["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(meta["bos"])
    w.add_eos_token_id(meta["eos"])
    if meta.get("eot") is not None:
        w.add_eot_token_id(meta["eot"])
    if meta.get("eom") is not None:
        w.add_eom_token_id(meta["eom"])
    if meta.get("pad") is not None:
        w.add_pad_token_id(meta["pad"])
    w.add_add_bos_token(meta["add_bos"])
    if chat_template:
        w.add_chat_template(chat_template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_tokenizer_json(path, tokens, types, merges, meta):
    """An HF `tokenizers` tokenizer.json equivalent to the GGUF (for cross-checks)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, normalizers, Regex, AddedToken
    vocab = {t: i for i, t in enumerate(tokens) if types[i] == TOKEN_NORMAL}
    pairs = [tuple(m.split(" ")) for m in merges]
    bpe = models.BPE(vocab=vocab, merges=pairs, ignore_merges=meta["ignore_merges"],
                     byte_fallback=False, fuse_unk=False)
    tk = Tokenizer(bpe)
    if meta["nfc"]:
        tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(meta["pattern"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tk.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    specials = [AddedToken(t, special=True, normalized=False, single_word=False, lstrip=False, rstrip=False)
                for i, t in enumerate(tokens) if types[i] == TOKEN_CONTROL]
    tk.add_special_tokens(specials)
    # add_special_tokens assigns ids in order after the base vocab; verify they match
    for i, t in enumerate(tokens):
        if types[i] == TOKEN_CONTROL:
            assert tk.token_to_id(t) == i, (t, tk.token_to_id(t), i)
    tk.save(path)


# ---------------------------------------------------------------- compare

def read_tokenizer_fields(path):
    from gguf import GGUFReader
    r = GGUFReader(path)
    out = {}
    for k, v in r.fields.items():
        if k.startswith("GGUF."):
            continue
        out[k] = v.contents()
    return out, len(r.tensors)


def compare(a, b):
    fa, ta = read_tokenizer_fields(a)
    fb, tb = read_tokenizer_fields(b)
    print(f"tensors: {ta} vs {tb}")
    ok = True
    for k in sorted(set(fa) | set(fb)):
        va, vb = fa.get(k, "<absent>"), fb.get(k, "<absent>")
        if va == vb:
            desc = f"{len(va)} entries" if isinstance(va, list) else repr(va)[:60]
            print(f"  same   {k}: {desc}")
            continue
        if isinstance(va, list) and isinstance(vb, list):
            nd = sum(1 for x, y in zip(va, vb) if x != y)
            first = next((i for i, (x, y) in enumerate(zip(va, vb)) if x != y), None)
            extra = f" first diff at {first}: {va[first]!r} vs {vb[first]!r}" if first is not None else ""
            print(f"  DIFF   {k}: len {len(va)} vs {len(vb)}, {nd} differing entries.{extra}")
        else:
            print(f"  DIFF   {k}: {repr(va)[:80]} vs {repr(vb)[:80]}")
        if k.startswith("tokenizer.ggml.") and k not in ("tokenizer.chat_template",):
            ok = False
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["llama3", "qwen2", "compare"])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tokenizer-json")
    ap.add_argument("--chat-template")
    ap.add_argument("--names", choices=["llama3", "llama-models"], default="llama3",
                    help="llama3 special-token names: Meta-Llama-3 (default, as upstream's vocab file) or llama_models' list")
    args = ap.parse_args()
    if args.kind == "compare":
        sys.exit(0 if compare(args.a, args.b) else 1)
    ranks, tokens, types, merges, meta = build(args.kind, args.a, args.names)
    tmpl = open(args.chat_template, encoding="utf-8").read() if args.chat_template else None
    write_gguf(args.b, tokens, types, merges, meta, tmpl)
    print(f"{args.b}: {len(tokens)} tokens, {len(merges)} merges, pre={meta['pre']}")
    if args.tokenizer_json:
        write_tokenizer_json(args.tokenizer_json, tokens, types, merges, meta)
        print(f"{args.tokenizer_json}: written")


if __name__ == "__main__":
    main()
