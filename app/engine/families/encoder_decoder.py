"""What an encoder-decoder family is to the lab (T5, BART, Marian): two stacks of blocks, the encoder's reading
the source, the decoder's reading the target causally and, in each block, the source again through its
cross-attention. A family says where those attention modules sit and how their scores are made; the engine
(app.engine.encoder_decoder) asks it, never "is this T5?"."""

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class EncoderDecoderFamily:
    name: str  # as the page says it: "T5", "BART", "Marian"
    model_types: tuple[str, ...]  # config.model_type values it reads
    blocks: str  # the list of blocks inside each stack (model.get_encoder(), model.get_decoder())
    self_attention: str  # a block's self-attention module, inside the block
    cross_attention: str  # a decoder block's attention over the source, inside the block
    projections: tuple[str, str, str]  # W_Q, W_K and W_V inside an attention module
    output_projection: str  # W_O inside an attention module: its input is the heads' contexts side by side
    # The attention module returns the relative-position bias its scores add, as its output's second part (T5's
    # buckets; a cross-attention's is zeros); else its scores add none.
    position_bias: bool
    normalization: Literal["post-LN", "pre-LN", "pre-RMSNorm"]
    positions: Literal["absolute", "sinusoidal", "relative"]
    kind: str = "encoder-decoder"
    decoder: bool = False  # not a causal decoder alone: it writes a target for a source
    attention_only: bool = False
    position_offset: int = 0
    default_pooling: str = "mean"

    def reads(self, config) -> bool:
        return True

    def modules(self, encoder_layers: int, decoder_layers: int) -> list[str]:
        """Every attention module and projection the lab hooks, as paths inside the model's stacks
        (`encoder.` and `decoder.` standing for model.get_encoder() and model.get_decoder())."""
        paths = []
        for stack, layers, kinds in (
            ("encoder", encoder_layers, [self.self_attention]),
            ("decoder", decoder_layers, [self.self_attention, self.cross_attention]),
        ):
            for layer in range(layers):
                for module in kinds:
                    attention = f"{stack}.{self.blocks}.{layer}.{module}"
                    parts = (*self.projections, self.output_projection)
                    paths += [attention, *(f"{attention}.{projection}" for projection in parts)]
        return paths
