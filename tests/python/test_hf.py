"""veloxquant.hf on small randomly initialised Llama, Qwen2 and Gemma 3 models built here (no
download): with fp16 the same greedy tokens as transformers' DynamicCache with SDPA and logits
within 1e-3; with a compressed method the cache really shrinks and generation runs to the end."""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import veloxquant.hf  # noqa: E402  (registers attn_implementation="veloxquant")

COMMON = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512)


def build(arch, attn):
    torch.manual_seed(0)
    if arch == "llama":
        config = transformers.LlamaConfig(**COMMON)
        cls = transformers.LlamaForCausalLM
    elif arch == "qwen2":
        config = transformers.Qwen2Config(**COMMON)
        cls = transformers.Qwen2ForCausalLM
    else:
        # Alternating sliding-window (16 tokens) and full layers, as Gemma 3 has them.
        config = transformers.Gemma3TextConfig(**COMMON, sliding_window=16,
                                               layer_types=["sliding_attention", "full_attention",
                                                            "sliding_attention"])
        cls = transformers.Gemma3ForCausalLM
    config._attn_implementation = attn
    model = cls(config).eval()
    return model


def generate(model, prompt, cache, n):
    with torch.no_grad():
        out = model.generate(prompt, cache=cache, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    return out.sequences[0, prompt.shape[1]:].tolist(), torch.stack(out.logits)


PROMPT = torch.randint(1, 256, (1, 40), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_fp16_matches_dynamic_cache_with_sdpa(arch):
    ref_model = build(arch, "sdpa")
    want_ids, want_logits = generate(ref_model, PROMPT, transformers.DynamicCache(config=ref_model.config), 24)
    model = build(arch, "veloxquant")
    cache = veloxquant.hf.Cache("fp16", model.config)
    got_ids, got_logits = generate(model, PROMPT, cache, 24)
    assert got_ids == want_ids
    assert (got_logits - want_logits).abs().max().item() < 1e-3
    assert cache.get_seq_length() == PROMPT.shape[1] + 23  # the last token is sampled, not fed


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_compressed_cache_shrinks_and_generates(arch):
    model = build(arch, "veloxquant")
    fp16 = veloxquant.hf.Cache("fp16", model.config)
    kivi = veloxquant.hf.Cache("kivi:kbits=2,vbits=2,residual=16", model.config)
    generate(model, PROMPT, fp16, 64)
    ids, _ = generate(model, PROMPT, kivi, 64)
    assert len(ids) == 64
    print(f"{arch}: fp16 cache {fp16.nbytes} bytes, kivi-2 {kivi.nbytes} bytes")
    assert kivi.nbytes < 0.6 * fp16.nbytes


def test_without_the_cache_the_attention_says_so():
    model = build("llama", "veloxquant")
    with torch.no_grad(), pytest.raises(ValueError, match="veloxquant.hf.Cache"):
        model(PROMPT, use_cache=False)
