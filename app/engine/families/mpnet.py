"""MPNet (all-mpnet-base-v2): BERT-like post-LN blocks, absolute positions after the padding index, and a
relative-position bias added to every head's scores (one per block, shared by the layers)."""

from app.engine.families.base import (
    Family,
    Hook,
    attention_output,
    ffn_output,
    output,
    split_heads,
    summed_embeddings,
)
from app.engine.names import LAYER, attn, block, embedding


def hooks(config) -> tuple[Hook, ...]:
    n = config.num_attention_heads
    return (
        Hook("embeddings.word_embeddings", output(embedding("word"))),
        Hook("embeddings.position_embeddings", output(embedding("position"))),
        *summed_embeddings("embeddings.LayerNorm"),
        Hook("{block}.attention.attn.q", split_heads(attn(LAYER, "q"), n)),
        Hook("{block}.attention.attn.k", split_heads(attn(LAYER, "k"), n)),
        Hook("{block}.attention.attn.v", split_heads(attn(LAYER, "v"), n)),
        # MPNetSelfAttention(hidden_states, attention_mask, position_bias): the bias its scores add.
        Hook("{block}.attention.attn", lambda args, out: {attn(LAYER, "position_bias"): args[2]}, before=True),
        *attention_output("{block}.attention.attn.o", n),
        Hook("{block}.attention.LayerNorm", output(block(LAYER, "resid_mid"))),
        *ffn_output("{block}.output.dense"),
        Hook("{block}.output.LayerNorm", output(block(LAYER, "output"))),
    )


MPNET = Family(
    name="MPNet",
    model_types=("mpnet",),
    blocks="encoder.layer",
    hooks=hooks,
    attention_output="attention.attn.o",
    post_attention_norm="attention.LayerNorm",
    normalization="post-LN",
    positions="relative",
    gated_ffn=False,
    position_offset=2,
)
