"""A pre-norm transformer feed-forward block: RMSNorm followed by a SwiGLU MLP."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def swiglu_hidden_dim(dim, multiple_of=64):
    """Hidden width: two thirds of 4*dim, rounded up to a multiple of ``multiple_of``."""
    hidden = int(2 * (4 * dim) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x / rms * self.weight


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        gate = F.silu(self.w_gate(x))
        return self.w_down(gate * self.w_up(x))


class PreNormBlock(nn.Module):
    def __init__(self, dim, multiple_of=64):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, swiglu_hidden_dim(dim, multiple_of))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


def scale_residual_init(block, n_layers, generator):
    """Re-initialise the residual output projection with a depth-scaled standard deviation."""
    std = 0.02 / math.sqrt(2 * n_layers)
    with torch.no_grad():
        block.mlp.w_down.weight.normal_(0.0, std, generator=generator)
    return block
