"""Every activation the lab records has one name, its place in the model, as in TransformerLens:
`embeddings.word`, `blocks.3.attn.q`, `blocks.3.output`. They are defined here and nowhere else: the
families' hooks record under them, a run serves them, and the last part of a name is the JSON field
and what the page reads (the page takes the labels below from /api/model).

Shapes, per sequence: embeddings and block rows [pos, d_model]; attn.q/k/v/context [head, pos, d_head];
attn.weights and attn.position_bias [head, query_pos, key_pos]; ffn_intermediate [pos, d_ffn];
final.normalized [pos, d_model].

An encoder-decoder (app.engine.encoder_decoder) has two stacks, and its names say which: the encoder's
self-attention `encoder.blocks.3.attn.weights`, the decoder's masked self-attention `decoder.blocks.3.attn.weights`,
and the decoder's cross-attention over the source `decoder.blocks.3.cross_attn.weights`. Shapes: q/k/v
[head, pos, d_head] (a cross-attention's q over the target, its k and v over the source); weights and
position_bias [head, query_pos, key_pos], a cross-attention's [head, target_pos, source_pos].
"""

LAYER = "{layer}"  # in a family's hooks: the block a hook sits in, filled in for each block

# In the order of the forward pass. A family records the ones its model has (see app.engine.families).
# "scaled": the word row times a constant the model multiplies it by (Gemma's √d_model).
EMBEDDINGS = ("word", "scaled", "position", "token_type", "sum", "normalized")
ATTENTION = ("q", "k", "v", "position_bias", "weights", "context")
BLOCK = ("attention_output", "resid_mid", "ffn_intermediate", "ffn_output", "output")
# A pre-norm model normalises the last block's output once more: what its LM head and its pooling read.
FINAL = "final.normalized"


def embedding(name: str) -> str:
    assert name in EMBEDDINGS, name
    return f"embeddings.{name}"


def attn(layer: int | str, name: str) -> str:
    assert name in ATTENTION, name
    return f"blocks.{layer}.attn.{name}"


def block(layer: int | str, name: str) -> str:
    assert name in BLOCK, name
    return f"blocks.{layer}.{name}"


# An encoder-decoder's stacks, its attentions (a decoder block reads the source with its cross-attention), and
# what each records.
STACKS = ("encoder", "decoder")
PAIR_ATTENTIONS = ("attn", "cross_attn")
PAIR_ATTENTION = ("q", "k", "v", "position_bias", "weights")


def stack_attn(stack: str, layer: int | str, name: str, kind: str = "attn") -> str:
    """An encoder-decoder's attention activation: `decoder.blocks.3.cross_attn.weights`."""
    assert stack in STACKS and kind in PAIR_ATTENTIONS and name in PAIR_ATTENTION, (stack, kind, name)
    assert kind == "attn" or stack == "decoder", "only the decoder reads the source"
    return f"{stack}.blocks.{layer}.{kind}.{name}"


def pair_ordered(names: set[str], encoder_layers: int, decoder_layers: int) -> list[str]:
    """An encoder-decoder's names in the order of its pass: the encoder's blocks, then each decoder block's
    self-attention and cross-attention."""
    order = [stack_attn("encoder", layer, name) for layer in range(encoder_layers) for name in PAIR_ATTENTION]
    for layer in range(decoder_layers):
        order += [stack_attn("decoder", layer, name, kind) for kind in PAIR_ATTENTIONS for name in PAIR_ATTENTION]
    unknown = names - set(order)
    assert not unknown, f"not in the registry: {sorted(unknown)}"
    return [name for name in order if name in names]


def ordered(names: set[str], n_layers: int) -> list[str]:
    """The names in the order of the forward pass: embeddings, then each block's attention and the rest."""
    order = [embedding(name) for name in EMBEDDINGS]
    for layer in range(n_layers):
        order += [attn(layer, name) for name in ATTENTION] + [block(layer, name) for name in BLOCK]
    order.append(FINAL)
    unknown = names - set(order)
    assert not unknown, f"not in the registry: {sorted(unknown)}"
    return [name for name in order if name in names]
