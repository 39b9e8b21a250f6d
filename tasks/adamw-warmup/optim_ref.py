"""AdamW with decoupled weight decay, and global-norm gradient clipping."""

import numpy as np


def clip_by_global_norm(grads, max_norm):
    """Scale every gradient by one common factor so that their joint L2 norm is at most max_norm.

    Returns the clipped gradients and the joint norm before clipping.
    """
    total = np.sqrt(sum(np.sum(g * g) for g in grads))
    scale = min(1.0, max_norm / (total + 1e-6))
    return [g * scale for g in grads], total


class AdamW:
    """Adam on a flat parameter vector, with weight decay applied outside the gradient."""

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        self.lr = lr
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.weight_decay = weight_decay
        self.t = 0
        self.m = None
        self.v = None

    def step(self, params, grads, lr=None):
        """Return the updated parameters (a new array); ``lr`` overrides the base rate."""
        lr = self.lr if lr is None else lr
        if self.m is None:
            self.m = np.zeros_like(params)
            self.v = np.zeros_like(params)
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * grads
        self.v = self.beta2 * self.v + (1 - self.beta2) * grads * grads
        m_hat = self.m / (1 - self.beta1**self.t)
        v_hat = self.v / (1 - self.beta2**self.t)
        params = params * (1 - lr * self.weight_decay)  # shrink weights; the gradient is untouched
        return params - lr * m_hat / (np.sqrt(v_hat) + self.eps)
