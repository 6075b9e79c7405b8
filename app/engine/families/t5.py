"""T5: an encoder-decoder with pre-RMSNorm blocks, no position table but a relative-position bias added to every
head's scores (log-spaced buckets of the key's offset from the query: both ways in the encoder, backwards only in
the decoder; computed in the first block of each stack and shared by the others), scores not scaled by 1/√d_head,
a cross-attention in each decoder block that adds no bias."""

from app.engine.families.encoder_decoder import EncoderDecoderFamily

T5 = EncoderDecoderFamily(
    name="T5",
    model_types=("t5", "mt5"),
    blocks="block",
    self_attention="layer.0.SelfAttention",
    cross_attention="layer.1.EncDecAttention",
    projections=("q", "k", "v"),
    output_projection="o",
    position_bias=True,
    normalization="pre-RMSNorm",
    positions="relative",
)
