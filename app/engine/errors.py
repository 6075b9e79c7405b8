"""What the engine refuses, and why: each error names what was asked and what the model has. The web layer
maps each kind to its HTTP status (app.main); the engine itself knows nothing of HTTP."""


class TextTooLong(ValueError):
    pass


class InvalidInput(ValueError):
    """The request is well formed but asks for something the model does not have (422)."""


class NothingToRead(InvalidInput):
    pass


class NeedsAdapter(InvalidInput):
    """The view needs what only a family's adapter records (Q/K/V, W_O, the FFN): the model has none."""


# What a model without an adapter cannot show: each needs the activations inside its blocks.
NEEDS_ADAPTER = ("qkv", "worked_example", "ffn", "measures", "ablation", "pipeline")


class PassFailed(RuntimeError):
    """The forward pass raised: this request fails, the lab keeps serving."""


class OutOfRange(LookupError):
    pass


class BlockTooLarge(InvalidInput):
    """A view needs whole blocks of weights, and the run is too long for them (Run.check_whole_block)."""
