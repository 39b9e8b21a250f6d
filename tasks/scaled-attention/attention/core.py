"""Multi-head scaled dot-product attention with a temperature, in NumPy."""

import numpy as np


def softmax(x, axis=-1):
    """Softmax along ``axis``; safe for very large logits."""
    # <paper2code name="softmax">
    # <paper2code name="stabilise">
    shifted = x - np.max(x, axis=axis, keepdims=True)  # exp() of a large logit overflows
    # </paper2code name="stabilise">
    # <paper2code name="normalise exponentials">
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)
    # </paper2code name="normalise exponentials">
    # </paper2code name="softmax">


def causal_mask(n_query, n_key):
    """Boolean (n_query, n_key) array, True where attention is forbidden."""
    # <paper2code name="causal mask">
    # Queries are aligned with the LAST n_query keys (a cache of earlier keys may precede them).

    offset = n_key - n_query
    return np.triu(np.ones((n_query, n_key), dtype=bool), k=1 + offset)
    # </paper2code name="causal mask">


def attend(q, k, v, causal=False, temperature=1.0):
    """Single-head attention. q: (..., n, d), k: (..., m, d), v: (..., m, d_v)."""
    # <paper2code name="attend">
    # <paper2code name="masked scores">
    # <paper2code name="scaled scores">
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / (np.sqrt(d) * temperature)
    # </paper2code name="scaled scores">
    # <paper2code name="apply causal mask">
    if causal:
        forbidden = causal_mask(scores.shape[-2], scores.shape[-1])
        scores = np.where(forbidden, -np.inf, scores)
    # </paper2code name="apply causal mask">
    # </paper2code name="masked scores">
    weights = softmax(scores, axis=-1)
    return weights @ v
    # </paper2code name="attend">


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
        # <paper2code name="split heads">
        """(batch, n, dim) -> (batch, heads, n, head_dim)."""
        b, n, _ = x.shape
        return x.reshape(b, n, self.n_heads, self.head_dim).transpose(0, 2, 1, 3)
        # </paper2code name="split heads">

    def merge_heads(self, x):
        # <paper2code name="merge heads">
        b, h, n, d = x.shape
        return x.transpose(0, 2, 1, 3).reshape(b, n, h * d)
        # </paper2code name="merge heads">

    def __call__(self, x, causal=False, temperature=1.0):
        # <paper2code name="multi-head forward">
        # <paper2code name="project">
        q = self.split_heads(x @ self.w_q)
        k = self.split_heads(x @ self.w_k)
        v = self.split_heads(x @ self.w_v)
        # </paper2code name="project">
        out = attend(q, k, v, causal=causal, temperature=temperature)
        return self.merge_heads(out) @ self.w_o
        # </paper2code name="multi-head forward">
