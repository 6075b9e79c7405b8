"""What a model family is to the lab: where its modules are, what each hook records, and the few facts
that change the arithmetic (causal or not, where the norms sit, how positions enter). The rest of the
engine asks the family, never "is this BERT?"."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from app.engine.names import LAYER, attn, block, embedding

# (module inputs, module output or None for a hook that runs before the module) -> {short name: tensor}
Reader = Callable[[tuple, object], dict[str, Tensor]]

# transformers' activation names (ACT2FN) as the page writes them: an approximation of GELU is GELU, as
# the papers that use one call it. A name not listed is written as the config gives it.
ACTIVATIONS = {
    "gelu": "GELU",
    "gelu_python": "GELU",
    "gelu_new": "GELU",
    "gelu_pytorch_tanh": "GELU",
    "gelu_fast": "GELU",
    "gelu_accurate": "GELU",
    "quick_gelu": "QuickGELU",
    "relu": "ReLU",
    "silu": "SiLU",
    "swish": "SiLU",
}
GATED = {"SiLU": "SwiGLU", "GELU": "GeGLU", "ReLU": "ReGLU"}  # a gated FFN's name by its activation


@dataclass(frozen=True)
class Hook:
    module: str  # inside the base model; "{block}" stands for each block's path
    read: Reader
    before: bool = False  # read the module's inputs before it runs (a forward pre-hook)
    site: str | None = None  # the patching site whose value is this module's output (app.engine.patch_sites)


@dataclass(frozen=True)
class Family:
    name: str  # as the page says it: "BERT", "GPT-2"
    model_types: tuple[str, ...]  # config.model_type values it reads
    blocks: str  # the list of blocks inside the base model
    hooks: Callable[[object], tuple[Hook, ...]]  # config -> its hooks
    attention_output: str  # W_O inside a block: its input is the heads' contexts side by side
    normalization: Literal["post-LN", "pre-LN", "pre-RMSNorm", "pre+post-RMSNorm"] | None
    positions: Literal["absolute", "relative", "rotary"] | None
    gated_ffn: bool  # act(x · W_gate) ⊙ (x · W_up), then W_down; else act(x · W₁), then W₂
    decoder: bool = False  # causal by training: the only mask it is read with; pooled by its last token
    token_types: bool = False  # the model takes token_type_ids
    ffn_size: Callable[[object], int] = lambda config: config.intermediate_size  # the FFN's inner width
    activation_name: Callable[[object], str] = lambda config: config.hidden_act  # the config's, for the FFN
    # post-LN: the LayerNorm after attention's residual, inside a block (ALTI decomposes through it)
    post_attention_norm: str | None = None
    # pre+post-RMSNorm: the RMSNorm on attention's output before its residual, inside a block (ALTI too)
    attention_norm: str | None = None
    norm_offset: float = 0.0  # an RMSNorm scales by offset + weight: Gemma's by 1 + weight
    qk_norm: bool = False  # each head's q and k are RMS-normalised before RoPE (Qwen3, Gemma 3)
    position_offset: int = 0  # positions the model reserves before the first token (RoBERTa's padding)
    # A step after the pass, on the recorded activations and the model: e.g. rotating q and k (RoPE)
    finish: Callable[[dict[str, Tensor], object], None] | None = None
    reads: Callable[[object], bool] = lambda config: True  # which configs of its model types it reads
    # No adapter: the model's own attention weights only (and its last hidden state for the sentence
    # vector); nothing inside its blocks is recorded (app.engine.families.attention_only).
    attention_only: bool = False

    @property
    def native_mask(self) -> str:
        return "causal" if self.decoder else "bidirectional"

    @property
    def default_pooling(self) -> str:
        return "last" if self.decoder else "mean"

    def activation(self, config) -> str:
        """The FFN's activation, as the page writes it: GELU, ReLU, SiLU, …"""
        name = self.activation_name(config)
        return ACTIVATIONS.get(name, name) if isinstance(name, str) else type(name).__name__

    def ffn(self, config) -> str:
        """The FFN's name: its activation, or for a gated one SwiGLU, GeGLU, …."""
        activation = self.activation(config)
        return GATED.get(activation, f"{activation}-gated") if self.gated_ffn else activation

    def labels(self, recorded: set[str], config) -> dict[str, str]:
        """What each recorded embedding and block activation is in this family, in formulas: the page's
        pipeline labels its rows and columns with these. Keys are the last part of the name."""
        activation = self.activation(config)
        norm = "RMSNorm" if "RMSNorm" in (self.normalization or "") else "LN"
        post = self.normalization == "post-LN"
        # A pre+post-RMSNorm block normalises each part's output again before adding it to the stream.
        added = "RMSNorm(attention)" if self.normalization == "pre+post-RMSNorm" else "attention"
        parts = [name for name in ("word", "position", "token_type") if f"embeddings.{name}" in recorded]
        labels = {
            "word": "the token's row of the word-embedding table",
            "scaled": f"the row × √d_model = × {config.hidden_size**0.5:.4g} (the model's embedding scale)",
            "position": "the position's row of the position-embedding table",
            "token_type": "the segment's row of the token-type table",
            "sum": " + ".join(parts).replace("token_type", "token type"),
            "normalized": f"LayerNorm({'sum' if len(parts) > 1 else 'the row'}): the input to block 0",
            "attention_output": "concat(heads) · W_O",
            "resid_mid": "LN(x + attention)" if post else f"x + {added} (the residual stream)",
            "ffn_intermediate": f"{activation}(x · W_gate) ⊙ (x · W_up)" if self.gated_ffn else f"{activation}(x · W₁)",
            "ffn_output": "the FFN's output projection" if post else f"FFN({norm}(x + attention))",
            "output": "LN(x + FFN)" if post else f"x + {added} + {added.replace('attention', 'FFN')}",
        }
        short = {name.rsplit(".", 1)[-1] for name in recorded if not name.startswith("final.")}  # not the final norm
        return {name: label for name, label in labels.items() if name in short}


def first(value) -> Tensor:
    """A module's tensor: the first of a tuple. Readers keep the batch: [batch, pos, …]."""
    return value[0] if isinstance(value, tuple) else value


def heads(x: Tensor, n_heads: int) -> Tensor:
    """[batch, pos, n_heads·d_head] -> [batch, head, pos, d_head]"""
    return x.unflatten(-1, (n_heads, -1)).transpose(-3, -2)


def output(name: str) -> Reader:
    return lambda args, out: {name: first(out)}


def inputs(name: str) -> Reader:
    return lambda args, out: {name: args[0]}


def split_heads(name: str, n_heads: int, repeat: int = 1) -> Reader:
    """A projection's output as heads; grouped K/V heads repeated so that query head h reads K/V head
    h // repeat, as the model's repeat_kv does."""
    if repeat == 1:
        return lambda args, out: {name: heads(first(out), n_heads)}
    return lambda args, out: {name: heads(first(out), n_heads).repeat_interleave(repeat, dim=-3)}


def input_heads(name: str, n_heads: int) -> Reader:
    return lambda args, out: {name: heads(args[0], n_heads)}


def attention_output(module: str, n_heads: int) -> tuple[Hook, Hook]:
    """W_O: its input is the heads' contexts side by side, its output the attention block's output."""
    return (
        Hook(module, input_heads(attn(LAYER, "context"), n_heads), before=True),
        Hook(module, output(block(LAYER, "attention_output"))),
    )


def ffn_output(module: str) -> tuple[Hook, Hook]:
    """The FFN's last projection: its input is the inner activations, its output the FFN's output."""
    return (
        Hook(module, inputs(block(LAYER, "ffn_intermediate")), before=True),
        Hook(module, output(block(LAYER, "ffn_output")), site="ffn_output"),
    )


def summed_embeddings(layer_norm: str) -> tuple[Hook, Hook]:
    """An encoder's embedding LayerNorm: its input is the embeddings' sum, as the model added them."""
    return (
        Hook(layer_norm, inputs(embedding("sum")), before=True),
        Hook(layer_norm, output(embedding("normalized"))),
    )
