"""VeloxQuant for Python: compressed KV caches with fused attention, and GGUF models that generate
with them.

    import veloxquant as vq
    cache = vq.KVCache("kivi:kbits=2", layers=1, kv_heads=8, head_dim=128)
    cache.append(0, k, v)                 # NumPy arrays (tokens, kv_heads, head_dim)
    out = cache.attend(0, q)              # (n_q, n_heads, head_dim), from the packed codes
    model = vq.Model("gemma-3-270m-q4_k_m.gguf")
    print("".join(model.generate("Once upon a time,", kv="kivi", max_tokens=32)))

Everything runs in libveloxquant (the C API) with the GIL released. A bad spec, shape or file
raises ValueError (OSError for a file that cannot be read or written) with the library's message.
"""
from __future__ import annotations

import codecs
from typing import Iterator, Mapping, Sequence

import numpy as np

from . import _core

__version__: str = _core.version()
__all__ = ["KVCache", "Method", "Model", "methods", "set_threads", "__version__"]

_ROPE = {"none": 0, "neox": 1, "norm": 2}


def set_threads(n: int) -> int:
    """Threads for compute (n <= 0: the default); returns the count now in use."""
    return _core.set_threads(n)


def methods() -> list[dict]:
    """The registered methods, as `veloxquant methods` lists them: name, summary and parameters."""
    return _core.methods()


class Method:
    """A KV-cache method spec such as "kivi:kbits=2" or "k=q8,v=q4", parsed and checked."""

    def __init__(self, spec: str | "Method"):
        self._m = _core.Method(spec.spec if isinstance(spec, Method) else spec)

    @property
    def spec(self) -> str:
        """The canonical spec (parameters at their defaults left out)."""
        return self._m.spec

    def bits(self, head_dim: int = 128) -> float:
        """Bits per element of compressed tokens (keys and values averaged) at this head size."""
        return self._m.bits(head_dim)[0]

    def key_bits(self, head_dim: int = 128) -> float:
        return self._m.bits(head_dim)[1]

    def value_bits(self, head_dim: int = 128) -> float:
        return self._m.bits(head_dim)[2]

    def bits_counted(self, head_dim: int = 128, ctx: int = 2048) -> float:
        """Bits per element everything counted when a sequence holds ctx tokens: the compressed
        tokens at bits(), the fp16 sinks and window at 16, as their share of ctx."""
        return self._m.bits_counted(head_dim, ctx)

    @property
    def needs_calibration(self) -> bool:
        return self._m.needs_calibration

    @property
    def window_tokens(self) -> int:
        """Newest tokens kept in fp16 (the larger of keys' and values' windows)."""
        return self._m.window()[0]

    @property
    def sink_tokens(self) -> int:
        return self._m.window()[1]

    def __repr__(self) -> str:
        return f"Method({self.spec!r})"


def _kv_array(a) -> np.ndarray:
    """float16 or float32, C-contiguous: as given when it already is (no copy), else as float32."""
    a = np.asarray(a)
    if a.dtype not in (np.float16, np.float32):
        a = a.astype(np.float32)
    return np.ascontiguousarray(a)


class KVCache:
    """A KV cache of `layers` layers stored packed by a method; attention reads the packed codes.

    Keys and values are appended per layer as arrays shaped (tokens, kv_heads, head_dim), float32
    or float16. sliding_window gives each layer's window (0: the whole context). A method that
    stores keys before RoPE (kvquant, commvq) needs rope="neox" or "norm" and the model's
    rope_base. calib: the calibration file of a method that needs one (`veloxquant calibrate`).
    """

    def __init__(self, method: str | Method, *, layers: int, kv_heads: int, head_dim: int,
                 sliding_window: Sequence[int] | None = None, calib: str | None = None, rope: str = "none",
                 rope_base: float = 10000.0, rope_freq_scale: float = 1.0, logit_softcap: float = 0.0,
                 _handle=None):
        if _handle is not None:
            self._c = _handle
            return
        if rope not in _ROPE:
            raise ValueError(f"rope: {rope!r} is not one of {', '.join(_ROPE)}")
        spec = method.spec if isinstance(method, Method) else method
        window = None if sliding_window is None else [int(w) for w in sliding_window]
        self._c = _core.Cache(spec, layers, kv_heads, head_dim, window, calib, _ROPE[rope], rope_base,
                              rope_freq_scale, logit_softcap)

    @classmethod
    def load(cls, path: str, calib: str | None = None) -> "KVCache":
        """A cache saved by save() (or by the C API), with its method and shapes."""
        return cls(None, layers=0, kv_heads=0, head_dim=0, _handle=_core.Cache.load(str(path), calib))

    def save(self, path: str) -> None:
        """Saves the cache as stored (packed codes, fp16 windows, positions) in a checksummed file."""
        self._c.save(str(path))

    @property
    def spec(self) -> str:
        return self._c.spec

    @property
    def shape(self) -> tuple[int, int, int]:
        """(layers, kv_heads, head_dim)."""
        return tuple(self._c.shape())

    def append(self, layer: int, k, v) -> None:
        """Appends tokens to a layer at its next positions; k, v: (tokens, kv_heads, head_dim)."""
        k, v = _kv_array(k), _kv_array(v)
        if k.dtype != v.dtype:
            k, v = k.astype(np.float32), v.astype(np.float32)
        self._c.append(layer, k, v)

    def attend(self, layer: int, q, positions=None, scale: float | None = None) -> np.ndarray:
        """Attention of queries (n_q, n_heads, head_dim) over the layer, from the packed codes.

        Query token i sits at positions[i] (default: the newest n_q positions) and sees the
        positions up to it (within the layer's window). n_heads is a multiple of kv_heads (GQA).
        scale defaults to 1/sqrt(head_dim).
        """
        return self._attend(layer, q, positions, scale, False)

    def attend_reference(self, layer: int, q, positions=None, scale: float | None = None) -> np.ndarray:
        """The same attention computed the plain way (blocks decoded, double-precision softmax)."""
        return self._attend(layer, q, positions, scale, True)

    def _attend(self, layer, q, positions, scale, reference):
        q = np.ascontiguousarray(q, dtype=np.float32)
        if positions is not None:
            positions = np.ascontiguousarray(positions, dtype=np.int64)
        return self._c.attend(layer, q, positions, 0.0 if scale is None else float(scale), reference)

    def n_tokens(self, layer: int = 0) -> int:
        return self._c.n_tokens(layer)

    def memory(self, layer: int | None = None) -> dict:
        """Bytes allocated, by role (blocks, fp16 windows, sinks, codec state), all layers or one."""
        return self._c.memory(-1 if layer is None else layer)

    @property
    def nbytes(self) -> int:
        """Bytes the cache holds allocated, all layers."""
        return self.memory()["total_bytes"]

    def clear(self) -> None:
        self._c.clear()

    def __repr__(self) -> str:
        layers, heads, dim = self.shape
        return f"KVCache({self.spec!r}, layers={layers}, kv_heads={heads}, head_dim={dim}, nbytes={self.nbytes})"


class Model:
    """A GGUF model the engine runs (memory-mapped); generate, chat, perplexity, tokenize."""

    def __init__(self, path: str):
        self.path = str(path)
        self._m = _core.Model(self.path)
        self.info: dict = self._m.info()

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self._m.tokenize(text, add_special, parse_special)

    def detokenize(self, ids: Sequence[int], special: bool = False) -> str:
        return self._m.detokenize([int(i) for i in ids], special).decode("utf-8", errors="replace")

    def generate(self, prompt: str, **options) -> Iterator[str]:
        """Text pieces of a continuation of prompt, as `veloxquant generate` produces it (the same
        tokens at the same options; temperature 0 is greedy), with the KV cache compressed by kv.
        Options: kv="fp16", max_tokens=128, temperature=0.0, top_k=40, top_p=0.95, min_p=0.05,
        seed=1234, ctx=4096, kv_budget=None, calib=None."""
        return self._generate(self.tokenize(prompt, add_special=True, parse_special=True), **options)

    def chat(self, messages: Sequence[Mapping[str, str]], *, template: str | None = None, **options) -> Iterator[str]:
        """The assistant's reply to messages [{"role": ..., "content": ...}], in the model's chat
        template (or the named one), as text pieces; options as generate()."""
        roles = [m["role"] for m in messages]
        contents = [m["content"] for m in messages]
        text = self._m.chat_format(roles, contents, template, True)
        return self._generate(self._m.tokenize(text, True, True), **options)

    def _generate(self, ids, *, kv: str = "fp16", max_tokens: int = 128, temperature: float = 0.0, top_k: int = 40,
                  top_p: float = 0.95, min_p: float = 0.05, seed: int = 1234, ctx: int = 4096,
                  kv_budget: int | None = None, calib: str | None = None) -> Iterator[str]:
        # Checked and set up here, so that a bad option raises at the call, not at the first next().
        session = _core.Session(self._m, kv, calib, ctx, 512, kv_budget)
        sampler = _core.Sampler(temperature, top_k, top_p, min_p, seed)
        if len(ids) + max_tokens > ctx:
            raise ValueError(f"the prompt ({len(ids)} tokens) and max_tokens {max_tokens} exceed the context size "
                             f"{ctx} (raise ctx)")
        session.feed(ids)
        return self._steps(session, sampler, max_tokens)

    @staticmethod
    def _steps(session, sampler, max_tokens) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        done = False
        for _ in range(max_tokens):
            _, piece, done = session.step(sampler)
            if piece:
                yield decoder.decode(piece)
            if done:
                break
        rest = decoder.decode(session.flush_text(), final=True)
        if rest:
            yield rest

    def perplexity(self, text: str, *, ctx: int = 512, kv: str = "fp16", chunks: int = -1, ubatch: int = 512,
                   calib: str | None = None, kv_budget: int | None = None) -> dict:
        """Perplexity over text as `veloxquant perplexity --json` reports it (the same fields and
        figures; for a compressed method also the KL divergence against an fp16 pass)."""
        r = self._m.perplexity(text, kv, calib, ctx, chunks, ubatch, kv_budget)
        r["kv"] = Method(kv).spec
        return r

    def __repr__(self) -> str:
        return f"Model({self.path!r}, arch={self.info['arch']!r})"
