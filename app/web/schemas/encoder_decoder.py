"""An encoder-decoder's run (T5, BART, Marian) as POST /api/analyze answers it: the source and the target, each
with its tokens, and the three kinds of attention per block and head."""

from typing import Literal

from pydantic import BaseModel, Field


class PairToken(BaseModel):
    index: int = Field(description="Its position in its own sequence: the source's, or the decoder's")
    text: str = Field(description='The piece as a person reads it (" cat" for a SentencePiece "▁cat")')
    label: str = Field(description="How the lab names the token: its text, and its index where the text repeats")
    id: int
    special: bool
    added: bool = Field(
        description="Put in by the tokenizer or the model, not read from the text: the end token </s>, and the "
        "decoder's start token before the target"
    )
    start: int = Field(description="Offset in Unicode code points into its own text: the source's or the target's")
    end: int
    segment: Literal["source", "target"]


class Source(BaseModel):
    text: str
    tokens: list[PairToken] = Field(description="What the encoder reads")
    truncated: bool = Field(description="The source was cut at the model's positions (max_input_tokens)")


class Target(BaseModel):
    text: str = Field(description="The target as given, or the written tokens decoded (special tokens left out)")
    tokens: list[PairToken] = Field(
        description="What the decoder reads: its start token, then the target's tokens. Row i of the decoder's and "
        "the cross-attention's weights is the step that chooses token i + 1"
    )
    written: bool = Field(description="Written by the model greedily (no target was given), not given")
    max_new_tokens: int | None = Field(description="A written target's bound on new tokens; null for a given one")


class AttentionKind(BaseModel):
    rows: Literal["source", "target"] = Field(description="Whose tokens the queries are")
    columns: Literal["source", "target"] = Field(description="Whose tokens the keys are")
    names: str = Field(
        description="The activation's name, block L standing for each block",
        examples=["decoder.blocks.L.cross_attn.weights"],
    )
    weights: list[list[list[list[float]]]] = Field(description="[layer][head][query][key], each row summing to 1")
    norm: list[list[list[list[float]]]] = Field(
        description="Norm-weighted attention, ‖α_ij f_h(x_j)‖ (Kobayashi et al. 2020): [layer][head][query][key]; in "
        "cross-attention x_j is source token j's row of the encoder's output"
    )


class PairAttention(BaseModel):
    encoder: AttentionKind = Field(description="The encoder's self-attention: source × source")
    decoder: AttentionKind = Field(description="The decoder's masked self-attention: target × target, causal")
    cross: AttentionKind = Field(description="The cross-attention: target rows × source columns")


class EncoderDecoderResponse(BaseModel):
    run_id: str = Field(description="The hash of the model, source and target (or max_new_tokens): the run's name")
    kind: Literal["encoder-decoder"]
    model: dict = Field(description="GET /api/model's answer for the model (kind: encoder-decoder)")
    source: Source
    target: Target
    attention: PairAttention
    not_measured: dict[str, str] = Field(
        description="The measures not computed for an encoder-decoder's run (ALTI), each with why"
    )
