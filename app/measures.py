"""What attention moves, beside its weights, from a kept run's numbers and the model's own weights.

- norm (Kobayashi et al., EMNLP 2020, "Attention is Not Only a Weight"): ‖α_ij f_h(x_j)‖ with
  f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h, the value vector as it leaves the head through its rows of W_O
  (the output bias left out, as in the paper). A large weight on a token whose transformed vector is
  short moves little. [layer, head, query, key]
- alti (Ferrando et al., EMNLP 2022, "Measuring the Mixing of Contextual Information in the Transformer"):
  the attention block's output for token i, after the residual and LayerNorm, is decomposed over the
  input tokens, y_i = Σ_j T̃_i(x_j) + (the LayerNorm's and W_O's biases), where
  T_i(x_j) = Σ_h α_ij^h f_h(x_j) + [i = j] x_j and T̃_i(x_j) = γ ⊙ (T_i(x_j) − mean T_i(x_j)) / σ_i with
  σ_i the LayerNorm's own scale for token i. Token j's contribution is its closeness to the output,
  c_ij = max(0, ‖y_i‖₁ − ‖y_i − T̃_i(x_j)‖₁), normalised so that Σ_j c_ij = 1 (the paper's ALTI with
  Manhattan distance; the FFN, token-wise, mixes nothing). [layer, 1, query, key]
- alti_rollout: the contributions rolled out through the blocks, R_l = C_l R_{l-1}: how much each input
  token makes up token i after block l. [layer, 1, query, key]

A switched-off head moves nothing: its f_h counts as zero, as W_O receives zeros from it.
"""

from typing import Literal

import torch
from torch import Tensor

Measure = Literal["weights", "norm", "alti", "alti_rollout"]
QUERY_CHUNK = 32  # queries decomposed at once: [chunk, key, d_model] floats stay about 25 MB at 512 tokens


def attention_output_weights(model, layer: int) -> tuple[Tensor, Tensor, torch.nn.LayerNorm]:
    """W_O and b_O of block `layer`, and the LayerNorm after its residual (BERT family's module paths)."""
    output = model.encoder.layer[layer].attention.output
    return output.dense.weight.detach(), output.dense.bias.detach(), output.LayerNorm


def transformed_values(run, model, layer: int) -> Tensor:
    """f_h(x_j): each head's value vectors through its columns of W_O. [head, key, d_model]"""
    v = run.activations[f"blocks.{layer}.attn.v"]  # [head, pos, d_head]
    w_o, _, _ = attention_output_weights(model, layer)
    d_head = v.shape[-1]
    per_head = w_o.unflatten(1, (run.n_heads, d_head)).permute(1, 2, 0)  # [head, d_head, d_model]
    f = v @ per_head  # [head, pos, d_model]
    for ablated_layer, head in run.spec.ablated:
        if ablated_layer == layer:
            f[head] = 0
    return f


def norm(run, model, layer: int) -> Tensor:
    """‖α_ij f_h(x_j)‖ = α_ij ‖f_h(x_j)‖. [head, query, key]"""
    weights = run.activations[f"blocks.{layer}.attn.weights"]
    return weights * transformed_values(run, model, layer).norm(dim=-1)[:, None, :]


def alti(run, model, layer: int) -> Tensor:
    """ALTI's contributions of each input token to each token's attention-block output. [query, key]"""
    weights = run.activations[f"blocks.{layer}.attn.weights"].double()  # [head, query, key]
    f = transformed_values(run, model, layer).double()  # [head, key, d_model]
    x = (
        run.activations["embeddings.normalized"] if layer == 0 else run.activations[f"blocks.{layer - 1}.output"]
    ).double()
    y = run.activations[f"blocks.{layer}.attention_residual_norm"].double()  # [query, d_model]
    _, b_o, layer_norm = attention_output_weights(model, layer)
    gamma = layer_norm.weight.detach().double()
    # σ_i: the LayerNorm's scale for token i, from its input x_i + attention output (bias included).
    resid = x + run.activations[f"blocks.{layer}.attention_output"].double()
    sigma = (resid.var(-1, unbiased=False) + layer_norm.eps).sqrt()  # [query]
    n = len(x)
    contributions = torch.empty(n, n, dtype=torch.float64)
    for start in range(0, n, QUERY_CHUNK):
        queries = torch.arange(start, min(start + QUERY_CHUNK, n))
        t = torch.einsum("hqk,hkd->qkd", weights[:, queries], f)  # [chunk, key, d_model]
        t[torch.arange(len(queries)), queries] += x[queries]  # the residual: token i carries itself
        t_tilde = gamma * (t - t.mean(-1, keepdim=True)) / sigma[queries, None, None]
        closeness = y[queries].abs().sum(-1, keepdim=True) - (y[queries, None, :] - t_tilde).abs().sum(-1)
        kept = closeness.clamp_min(0)
        contributions[queries] = kept / kept.sum(-1, keepdim=True)
    return contributions.float()


@torch.inference_mode()
def measure_blocks(run, model, measure: Measure, layer: int | None = None) -> list[Tensor]:
    """The measure for every block, or only for `layer` (a valid one), in the attention endpoint's shape:
    [head (or 1), query, key] each. Only what is asked for is computed; a rollout needs the blocks before."""
    layers = range(run.n_layers) if layer is None else [layer]
    if measure == "weights":
        return [run.activations[f"blocks.{index}.attn.weights"] for index in layers]
    if measure == "norm":
        return [norm(run, model, index) for index in layers]
    if measure == "alti":
        return [alti(run, model, index)[None] for index in layers]
    rolled, flow = [], torch.eye(len(run.tokens))
    for index in range(layers[-1] + 1):
        flow = alti(run, model, index) @ flow
        rolled.append(flow[None])
    return [rolled[index] for index in layers]
