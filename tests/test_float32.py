"""The rule of tests/float32.py is wide enough for what float32 does and narrow enough for a bug: MiniLM's
weights in a padded pass are within pass_tolerance of its weights alone, and a wrong head, a missing 1/√d or
a shifted key are far outside it."""

import torch

from app.engine.engine import Engine
from tests.float32 import pass_tolerance

TEXT = "The river bank was steep and the animal was tired."


def test_a_padded_pass_is_within_the_tolerance_and_a_wrong_head_scale_or_key_is_not(minilm):
    engine = Engine(minilm, 1000)
    padded, _ = engine.compute_batch([engine.spec(TEXT), engine.spec(TEXT + " " + TEXT)])
    ids = torch.tensor([[token.id for token in padded.tokens]])
    with torch.inference_mode():
        alone = minilm.model(input_ids=ids, output_attentions=True).attentions
    atol = pass_tolerance(minilm.model.config)
    for layer in range(6):
        q, k = (padded.activations[f"blocks.{layer}.attn.{name}"] for name in "qk")  # [head, pos, d_head]
        weights, reference = padded.weights(layer), alone[layer][0]
        assert (weights - reference).abs().max() <= atol
        wrong_head = (weights.roll(1, dims=0) - reference).abs().max()
        unscaled = ((q @ k.transpose(-1, -2)).softmax(-1) - reference).abs().max()
        shifted_key = (weights.roll(1, dims=-1) - reference).abs().max()
        assert min(wrong_head, unscaled, shifted_key) > 100 * atol, (layer, wrong_head, unscaled, shifted_key)
