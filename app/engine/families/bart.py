"""BART and Marian: encoder-decoders of post-LN blocks, split
Q/K/V scaled by 1/√d_head, a cross-attention in each decoder block; BART's positions are a learned table,
Marian's fixed sinusoids."""

from dataclasses import replace

from app.engine.families.encoder_decoder import EncoderDecoderFamily

BART = EncoderDecoderFamily(
    name="BART",
    model_types=("bart",),
    blocks="layers",
    self_attention="self_attn",
    cross_attention="encoder_attn",
    projections=("q_proj", "k_proj", "v_proj"),
    output_projection="out_proj",
    position_bias=False,
    normalization="post-LN",
    positions="absolute",
)

MARIAN = replace(BART, name="Marian", model_types=("marian",), positions="sinusoidal")
