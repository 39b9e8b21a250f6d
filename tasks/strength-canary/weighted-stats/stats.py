"""Two small statistics: a weighted mean and an affine map."""


def weighted_mean(values, weights):
    """sum_i w_i x_i / sum_i w_i."""
    # <paper2code name="weighted mean">
    total = sum(w * x for w, x in zip(weights, values))
    return total / sum(weights)
    # </paper2code name="weighted mean">


def affine(x, scale, offset):
    """scale * x + offset."""
    # <paper2code name="affine map">
    y = x * scale
    return y + offset
    # </paper2code name="affine map">
