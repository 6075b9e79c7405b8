"""One forward pass of a BERT-family encoder with every intermediate recorded by forward hooks.

Activations are named by where they live, as in TransformerLens: `blocks.3.attn.weights` is block 3's
softmax(QKᵀ/√d + mask). The last part of a name is the field the API returns and the name the page uses.
The numbers are the model's own: hooks read what the real transformers modules compute.
"""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

Reader = Callable[[tuple, object], dict[str, Tensor]]  # (module inputs, module output) -> activations
Heads = tuple[tuple[int, int], ...]  # (layer, head) pairs


def _readers(n_heads: int) -> dict[str, Reader]:
    """Hooked module path (inside the model, `{block}` for each layer) -> what its hook records."""

    def heads(x: Tensor) -> Tensor:  # [1, pos, d_model] -> [head, pos, d_head]
        return x[0].unflatten(-1, (n_heads, -1)).transpose(0, 1)

    return {
        "embeddings.word_embeddings": lambda args, out: {"embeddings.word": out[0]},  # [pos, d_model]
        "embeddings.position_embeddings": lambda args, out: {"embeddings.position": out[0]},
        "embeddings.token_type_embeddings": lambda args, out: {"embeddings.token_type": out[0]},
        # LayerNorm's input is word + position + token_type: the sum, as the model itself added it.
        "embeddings.LayerNorm": lambda args, out: {"embeddings.sum": args[0][0], "embeddings.normalized": out[0]},
        "{block}.attention.self.query": lambda args, out: {"attn.q": heads(out)},  # [head, pos, d_head]
        "{block}.attention.self.key": lambda args, out: {"attn.k": heads(out)},
        "{block}.attention.self.value": lambda args, out: {"attn.v": heads(out)},
        # Self-attention returns (context, weights) with weights = softmax(QKᵀ/√d + mask).
        "{block}.attention.self": lambda args, out: {
            "attn.context": heads(out[0]),  # [head, pos, d_head]
            "attn.weights": out[1][0],  # [head, query_pos, key_pos]
        },
        "{block}.attention.output.dense": lambda args, out: {"attention_output": out[0]},  # concat(heads) W_O
        "{block}.attention.output": lambda args, out: {"attention_residual_norm": out[0]},  # LN(x + attn)
        "{block}.intermediate": lambda args, out: {"ffn_intermediate": out[0]},  # GELU(x W_1) [pos, d_ffn]
        "{block}.output.dense": lambda args, out: {"ffn_output": out[0]},  # [pos, d_model]
        "{block}": lambda args, out: {"output": out[0]},  # LN(h + FFN(h)) [pos, d_model]
    }


def _hook_table(config) -> dict[str, tuple[str, Reader]]:
    """Module path -> (activation-name prefix, reader) for every hooked module of the model."""
    table = {}
    for path, reader in _readers(config.num_attention_heads).items():
        if "{block}" not in path:
            table[path] = ("", reader)
            continue
        for layer in range(config.num_hidden_layers):
            table[path.format(block=f"encoder.layer.{layer}")] = (f"blocks.{layer}.", reader)
    return table


def hooked_modules(config) -> list[str]:
    return list(_hook_table(config))


def additive_mask(kind: str, n_tokens: int) -> Tensor:
    """What the model adds to QKᵀ/√d: 0 where a query may look, the float32 minimum where it may not.

    exp(minimum - max) underflows to exactly 0, so masked weights are exactly 0, as in the model.
    """
    mask = torch.zeros(n_tokens, n_tokens)  # [query_pos, key_pos]
    if kind == "causal":
        mask = mask.masked_fill(
            torch.ones(n_tokens, n_tokens, dtype=torch.bool).triu(1), torch.finfo(torch.float32).min
        )
    return mask


@contextmanager
def recording(model: torch.nn.Module) -> Iterator[dict[str, Tensor]]:
    """Hooks every module of the table for the duration of the block, and always removes them.

    Hooks are global to the model, so each records only the pass of the thread that set it: two passes
    may run at once on one model without recording into each other.
    """
    activations: dict[str, Tensor] = {}
    owner = threading.get_ident()
    handles = []
    try:
        for path, (prefix, reader) in _hook_table(model.config).items():
            # No copies: in eval mode nothing the model computes is modified in place after its module
            # returns (the output_attentions tests would see it), so keeping the tensors is enough.
            def hook(module, args, out, prefix=prefix, reader=reader):
                if threading.get_ident() == owner:
                    activations.update({prefix + name: value for name, value in reader(args, out).items()})

            handles.append(model.get_submodule(path).register_forward_hook(hook))
        yield activations
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def ablating(model: torch.nn.Module, heads: Heads) -> Iterator[None]:
    """Switches heads off: their context (their columns of the concatenation) is zeroed before W_O. Their
    attention weights are still computed and recorded; only what they pass on is gone."""
    owner = threading.get_ident()
    d_head = model.config.hidden_size // model.config.num_attention_heads
    handles = []
    try:
        for layer in sorted({layer for layer, _ in heads}):
            chosen = [head for chosen_layer, head in heads if chosen_layer == layer]

            def zero_heads(module, args, out, chosen=chosen):
                if threading.get_ident() != owner:
                    return None
                context = out[0].clone()  # [1, pos, d_model], heads side by side
                for head in chosen:
                    context[..., head * d_head : (head + 1) * d_head] = 0
                return (context, *out[1:])

            self_attention = model.get_submodule(f"encoder.layer.{layer}.attention.self")
            handles.append(self_attention.register_forward_hook(zero_heads))
        yield
    finally:
        for handle in handles:
            handle.remove()


def capture(
    model: torch.nn.Module,
    input_ids: Tensor,
    token_type_ids: Tensor,
    mask: str,
    ablate: tuple[tuple[int, int], ...] = (),
) -> dict[str, Tensor]:
    """Runs the model once on one sequence ([pos] ids) and returns every named activation."""
    n_tokens = input_ids.shape[-1]
    # A prepared 4-D mask is used by the model as it is: this is how "causal" runs inside the same model.
    attention_mask = additive_mask(mask, n_tokens)[None, None]  # [batch, 1, query_pos, key_pos]
    # Recording hooks go first: a switched-off head's context is recorded as it computed it (weights·V),
    # and only then zeroed for the rest of the model.
    with torch.inference_mode(), recording(model) as activations, ablating(model, ablate):
        model(input_ids=input_ids[None], token_type_ids=token_type_ids[None], attention_mask=attention_mask)
    return activations


def attention_scores(q: Tensor, k: Tensor, mask: Tensor) -> Tensor:
    """QKᵀ/√d + mask, the logits the model feeds to softmax: [head, query_pos, key_pos]."""
    return q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + mask


def pool(output: Tensor, strategy: str) -> Tensor:
    """One vector for the sentence from the last block's [pos, d_model] (no padding: one sequence)."""
    if strategy == "cls":
        return output[0]
    if strategy == "max":
        return output.max(dim=0).values
    return output.mean(dim=0)
