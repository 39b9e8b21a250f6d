"""Learning-rate schedule: linear warm-up, then cosine decay to a floor."""

import math


def warmup_cosine(step, base_lr, warmup_steps, total_steps, min_lr=0.0):
    """Learning rate at 0-based ``step``."""
    # <paper2code name="warmup cosine schedule">
    # <paper2code name="linear warmup">
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    # </paper2code name="linear warmup">
    # <paper2code name="cosine decay">
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + math.cos(math.pi * progress))
    # </paper2code name="cosine decay">
    # </paper2code name="warmup cosine schedule">
