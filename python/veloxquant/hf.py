"""A Hugging Face transformers drop-in: a Cache whose layers hold their keys and values packed by a
VeloxQuant method, and an attention function, "veloxquant", that runs VeloxQuant's fused attention
on those packed codes.

    import veloxquant.hf
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="veloxquant")
    out = model.generate(**inputs, past_key_values=veloxquant.hf.Cache("kivi:kbits=2", model.config))

Importing this module registers the attention function (and a mask function that builds no mask:
the cache applies causality and each layer's sliding window itself). Scope: batch size 1 without
padding, CPU tensors (computed in float32), methods that need no calibration file. The
transformers version this is written against is 5.x (its Cache of CacheLayerMixin layers).
"""
from __future__ import annotations

import numpy as np
import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache as _HfCache
from transformers.cache_utils import CacheLayerMixin, get_layer_types_and_kwargs
from transformers.masking_utils import AttentionMaskInterface

from . import KVCache, Method

__all__ = ["Cache", "attention"]


def _tokens_heads_dims(t: torch.Tensor) -> np.ndarray:
    """[1, heads, tokens, head_dim] (transformers' layout) as a float32 (tokens, heads, head_dim) array."""
    if t.shape[0] != 1:
        raise ValueError(f"veloxquant.hf: batch size {t.shape[0]}; the packed cache holds one sequence")
    if t.device.type != "cpu":
        raise ValueError(f"veloxquant.hf: tensors on {t.device}; the packed cache runs on the CPU")
    return t[0].detach().transpose(0, 1).to(torch.float32).contiguous().numpy()


class _PackedLayer(CacheLayerMixin):
    """One model layer's keys and values in a one-layer VeloxQuant KVCache."""

    is_compileable = False
    is_croppable = False

    def __init__(self, method: Method, sliding_window: int = 0):
        super().__init__()
        self.method = method
        self.sliding_window = int(sliding_window or 0)
        self.is_sliding = self.sliding_window > 0
        self.cache: KVCache | None = None
        self.cumulative_length = 0

    def lazy_initialization(self, key_states, value_states):
        self.device = key_states.device
        self.dtype = key_states.dtype
        self.cache = KVCache(self.method, layers=1, kv_heads=key_states.shape[1], head_dim=key_states.shape[3],
                             sliding_window=[self.sliding_window])
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.cache.append(0, _tokens_heads_dims(key_states), _tokens_heads_dims(value_states))
        self.cumulative_length += key_states.shape[-2]
        # The attention function reads the packed cache, not these tensors: they only carry it there.
        key_states._veloxquant_cache = self.cache
        return key_states, value_states

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        if self.is_sliding and self.cumulative_length >= self.sliding_window:
            return self.sliding_window - 1 + query_length, self.cumulative_length - self.sliding_window + 1
        return self.cumulative_length + query_length, 0

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_max_length(self) -> int:
        return self.sliding_window if self.is_sliding else -1

    def reset(self) -> None:
        if self.cache is not None:
            self.cache.clear()
        self.cumulative_length = 0

    @property
    def nbytes(self) -> int:
        return 0 if self.cache is None else self.cache.nbytes


class Cache(_HfCache):
    """A transformers Cache holding each layer's keys and values packed by a VeloxQuant method.

    Pass it as past_key_values to generate() (or forward) of a model loaded with
    attn_implementation="veloxquant". config: the model's config (its layer types give each
    layer's sliding window).
    """

    def __init__(self, method: str | Method, config):
        method = Method(method)
        if method.needs_calibration:
            raise ValueError(f"veloxquant.hf: {method.spec} needs a calibration file, which this cache does not take")
        decoder = config.get_text_config(decoder=True)
        layer_types, layer_kwargs = get_layer_types_and_kwargs(decoder)
        layers = []
        for kind, kw in zip(layer_types, layer_kwargs):
            if kind not in ("full_attention", "sliding_attention"):
                raise ValueError(f"veloxquant.hf: layer type {kind!r} is not supported")
            layers.append(_PackedLayer(method, kw.get("sliding_window", 0) if kind == "sliding_attention" else 0))
        super().__init__(layers=layers)
        self.method = method

    @property
    def nbytes(self) -> int:
        """Bytes the packed caches of all layers hold allocated."""
        return sum(layer.nbytes for layer in self.layers)


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs):
    """transformers' attention interface: the fused attention of VeloxQuant over the layer's packed
    cache, for the new tokens (causal, with the layer's sliding window). Returns the output as
    [1, tokens, heads, head_dim] and no weights."""
    cache = getattr(key, "_veloxquant_cache", None)
    if cache is None:
        raise ValueError('attn_implementation="veloxquant" needs past_key_values=veloxquant.hf.Cache(...)')
    if softcap:
        raise ValueError("veloxquant.hf: attention logit soft-capping is not supported here")
    out = cache.attend(0, _tokens_heads_dims(query), None, scaling)
    return torch.from_numpy(out).unsqueeze(0).to(query.dtype), None


def _no_mask(*args, **kwargs):
    return None


AttentionInterface.register("veloxquant", attention)
AttentionMaskInterface.register("veloxquant", _no_mask)
