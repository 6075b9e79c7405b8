"""How far apart two correct float32 computations of the same number may be: the one rule every test that
compares the lab with transformers or NumPy takes its tolerance from, so that the suite passes on any x86
machine (a padded batch sums in another order than a lone pass; Intel's kernels in another than AMD's) and
still catches a wrong head, a missing scale or a shifted position.

A float32 sum or dot product of n terms, in any order, is off from the exact sum by at most
(n - 1)·u·Σ|terms|, with u = 2⁻²⁴ the unit roundoff (Higham, Accuracy and Stability of Numerical
Algorithms, §3.1 and §4.2). That worst case needs every rounding to fall the same way; the roundings of
ordinary data are independent and add up like a random walk, so the error stays under λ·√n·u·Σ|terms|
with probability at least 1 - 2·exp(-λ²/2) (Higham and Mary, "A new approach to probabilistic rounding
error analysis", SIAM J. Sci. Comput. 2019). Two orders of the same sum differ by at most their two errors.

A number a model computes is the end of a chain of such sums. Layer norm divides a block's output and its
error by the same spread, so a block passes its input's relative error on without growing it, and softmax
moves a weight by at most half its scores' error (its Jacobian diag(w) - w·wᵀ has ∞-norm at most ½). So a
number after L blocks carries the errors of L blocks, each about that of its longest sum (the MLP's down
projection, `intermediate_size` terms), as one sum of L·intermediate_size terms would. Its magnitude is the
size of the numbers compared: 1 for attention weights and other shares of 1, the largest |value| for
hidden states and pooled vectors. This is the typical size of the errors, with λ's room for what it leaves
out (scores reach 30 in MiniLM's first block), not a bound for adversarial inputs, which would be too wide
to catch a bug.

So a lone pass of MiniLM and a padded batch's (6 blocks of 1,536) may put an attention weight
2·6·√9,216·u ≈ 6.9e-5 apart: 1.3e-6 at most here (an AMD EPYC), 2.25e-6 reported on an Intel Xeon (#45),
while a wrong head, a missing 1/√d or a shifted key move weights by 0.69 and more (tests/test_float32.py).
"""

import math

import numpy as np

UNIT_ROUNDOFF = 2.0**-24
# 1 - 2·exp(-λ²/2) = 1 - 3e-8: a comparison of thousands of numbers fails by chance about once in 10⁴ runs.
LAMBDA = 6


def tolerance(terms: int, magnitude: float = 1.0) -> float:
    """The absolute difference two float32 computations of one sum of `terms` terms, whose absolute values
    add up to `magnitude`, may show."""
    return 2 * LAMBDA * math.sqrt(terms) * UNIT_ROUNDOFF * magnitude


def pass_terms(config, blocks: int | None = None) -> int:
    """The terms a number computed in the first `blocks` blocks (all of them by default) carries errors of:
    each block's about its longest sum's, the MLP's down projection (4 × hidden where a config has no
    intermediate_size, as GPT-2's)."""
    longest = max(config.hidden_size, getattr(config, "intermediate_size", None) or 4 * config.hidden_size)
    return (config.num_hidden_layers if blocks is None else blocks) * longest


def pass_tolerance(config, magnitude: float = 1.0, blocks: int | None = None) -> float:
    """tolerance() for a number at the end of a model's pass: an attention weight by default."""
    return tolerance(pass_terms(config, blocks), magnitude)


def product_tolerance(a, b) -> float:
    """tolerance() for each entry of a float32 product a @ b ([..., n] @ [n, ...]) computed elsewhere, in
    another order or in float64: sums of n terms, the largest Σ|terms| of them."""
    a, b = np.abs(np.asarray(a, dtype=np.float64)), np.abs(np.asarray(b, dtype=np.float64))
    return tolerance(a.shape[-1], float((a @ b).max()))


def largest(values) -> float:
    """The magnitude of numbers compared: their largest |value|."""
    return float(np.abs(np.asarray(values, dtype=np.float64)).max())


def sum_tolerance(terms) -> float:
    """tolerance() for a float32 sum of exactly these terms."""
    terms = np.asarray(terms, dtype=np.float64)
    return tolerance(terms.size, float(np.abs(terms).sum()))


# Two computations are compared bit for bit only for one of these reasons, said at the comparison as a comment
# `# bit for bit: <reason>` (tests/test_exactness.py reads the suite for it). Two passes of different shapes or
# paths (padded and lone, batched and alone, windowed and whole, cached and full) take a tolerance above.
BITWISE_REASONS = {
    "read back": "the same numbers stored or sent and read back: a cache, JSON, an encoding, a page, the same run",
    "same shapes": "the same kernels on the same shapes and inputs: a lone pass against the model's own lone pass, "
    "a block computed again at its pass's padded length, one model's copy against the other",
    "no rounding": "nothing is rounded: a table's rows, a max, integers, booleans",
}
