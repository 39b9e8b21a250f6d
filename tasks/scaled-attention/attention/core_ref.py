"""Multi-head scaled dot-product attention with a temperature, in NumPy."""

import numpy as np


def softmax(x, axis=-1):
    """Softmax along ``axis``; safe for very large logits."""
    shifted = x - np.max(x, axis=axis, keepdims=True)  # exp() of a large logit overflows
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def causal_mask(n_query, n_key):
    """Boolean (n_query, n_key) array, True where attention is forbidden."""
    # Queries are aligned with the LAST n_query keys (a cache of earlier keys may precede them).

    offset = n_key - n_query
    return np.triu(np.ones((n_query, n_key), dtype=bool), k=1 + offset)


def attend(q, k, v, causal=False, temperature=1.0):
    """Single-head attention. q: (..., n, d), k: (..., m, d), v: (..., m, d_v)."""
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / (np.sqrt(d) * temperature)
    if causal:
        forbidden = causal_mask(scores.shape[-2], scores.shape[-1])
        scores = np.where(forbidden, -np.inf, scores)
    weights = softmax(scores, axis=-1)
    return weights @ v


class MultiHeadAttention:
    """Multi-head self-attention with fixed random projections (no training here)."""

    def __init__(self, dim, n_heads, seed=0):
        assert dim % n_heads == 0, "dim must be divisible by n_heads"
        self.dim = dim
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        rng = np.random.default_rng(seed)
        scale = 1.0 / np.sqrt(dim)
        self.w_q = rng.normal(0.0, scale, size=(dim, dim))
        self.w_k = rng.normal(0.0, scale, size=(dim, dim))
        self.w_v = rng.normal(0.0, scale, size=(dim, dim))
        self.w_o = rng.normal(0.0, scale, size=(dim, dim))

    def split_heads(self, x):
        """(batch, n, dim) -> (batch, heads, n, head_dim)."""
        b, n, _ = x.shape
        return x.reshape(b, n, self.n_heads, self.head_dim).transpose(0, 2, 1, 3)

    def merge_heads(self, x):
        b, h, n, d = x.shape
        return x.transpose(0, 2, 1, 3).reshape(b, n, h * d)

    def __call__(self, x, causal=False, temperature=1.0):
        q = self.split_heads(x @ self.w_q)
        k = self.split_heads(x @ self.w_k)
        v = self.split_heads(x @ self.w_v)
        out = attend(q, k, v, causal=causal, temperature=temperature)
        return self.merge_heads(out) @ self.w_o
