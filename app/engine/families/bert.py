"""BERT and its relatives with the same modules (MiniLM, RoBERTa, XLM-R, CamemBERT): post-LN blocks,
absolute positions and token types added before a LayerNorm, split Q/K/V, GELU FFN."""

from app.engine.families.base import Family, Hook, heads, inputs, output, split_heads
from app.engine.names import LAYER, attn, block, embedding


def hooks(config) -> tuple[Hook, ...]:
    n = config.num_attention_heads
    return (
        Hook("embeddings.word_embeddings", output(embedding("word"))),
        Hook("embeddings.position_embeddings", output(embedding("position"))),
        Hook("embeddings.token_type_embeddings", output(embedding("token_type"))),
        # LayerNorm's input is word + position + token type: the sum, as the model itself added it.
        Hook("embeddings.LayerNorm", inputs(embedding("sum")), before=True),
        Hook("embeddings.LayerNorm", output(embedding("normalized"))),
        Hook("{block}.attention.self.query", split_heads(attn(LAYER, "q"), n)),
        Hook("{block}.attention.self.key", split_heads(attn(LAYER, "k"), n)),
        Hook("{block}.attention.self.value", split_heads(attn(LAYER, "v"), n)),
        Hook("{block}.attention.output.dense", lambda args, out: {attn(LAYER, "context"): heads(args[0][0], n)}, True),
        Hook("{block}.attention.output.dense", output(block(LAYER, "attention_output"))),
        Hook("{block}.attention.output.LayerNorm", output(block(LAYER, "resid_mid"))),  # LN(x + attention)
        Hook("{block}.output.dense", inputs(block(LAYER, "ffn_intermediate")), before=True),  # GELU(x W_1)
        Hook("{block}.output.dense", output(block(LAYER, "ffn_output"))),
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
    ffn="GELU",
    token_types=True,
)

# RoBERTa's positions start after its padding index (2 for a pad id of 1); its layout is BERT's.
ROBERTA = Family(
    **{**BERT.__dict__, "name": "RoBERTa", "model_types": ("roberta", "xlm-roberta", "camembert"), "position_offset": 2}
)
