"""BERT and its relatives with the same modules (MiniLM, RoBERTa, XLM-R, CamemBERT): post-LN blocks,
absolute positions and token types added before a LayerNorm, split Q/K/V, GELU FFN."""

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
        Hook("embeddings.token_type_embeddings", output(embedding("token_type"))),
        *summed_embeddings("embeddings.LayerNorm"),  # word + position + token type, then LayerNorm
        Hook("{block}.attention.self.query", split_heads(attn(LAYER, "q"), n)),
        Hook("{block}.attention.self.key", split_heads(attn(LAYER, "k"), n)),
        Hook("{block}.attention.self.value", split_heads(attn(LAYER, "v"), n)),
        *attention_output("{block}.attention.output.dense", n),
        Hook("{block}.attention.output.LayerNorm", output(block(LAYER, "resid_mid"))),  # LN(x + attention)
        *ffn_output("{block}.output.dense"),  # its input: GELU(x W_1)
        Hook("{block}.output.LayerNorm", output(block(LAYER, "output"))),  # LN(resid_mid + FFN)
    )


BERT = Family(
    name="BERT",
    model_types=("bert",),
    blocks="encoder.layer",
    hooks=hooks,
    attention_output="attention.output.dense",
    post_attention_norm="attention.output.LayerNorm",
    normalization="post-LN",
    positions="absolute",
    gated_ffn=False,
    token_types=True,
)

# RoBERTa's positions start after its padding index (2 for a pad id of 1); its layout is BERT's.
ROBERTA = Family(
    **{**BERT.__dict__, "name": "RoBERTa", "model_types": ("roberta", "xlm-roberta", "camembert"), "position_offset": 2}
)
