"""What every router's bodies share: the model's name, the texts a request reads, masks, poolings, errors and a
long computation's progress."""

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

Matrix = list[list[float]]  # rows are tokens


Mask = Literal["bidirectional", "causal"]


# The poolings sentence-transformers has: every model offers the first four; a folder whose Pooling module
# names another offers that one too.
Pooling = Literal["mean", "cls", "max", "last", "mean_sqrt_len", "weighted_mean"]


def readable(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty or only whitespace: type something to analyze")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("contains an unpaired UTF-16 surrogate, which is not a character") from None
    return text


ReadableText = Annotated[str, AfterValidator(readable)]


PromptText = Annotated[
    ReadableText,
    Field(description="The prompt; truncated to the model's 512 tokens.", examples=["the river bank"]),
]


ModelName = Annotated[
    str | None, Field(None, max_length=200, description="One of /api/models; default: the lab's default model")
]


class TokenPublic(BaseModel):
    index: int
    text: str = Field(
        description="The subword piece: WordPiece's own (`##` marks a continuation), or the text a byte-level or "
        'SentencePiece piece stands for (" cat")'
    )
    label: str = Field(
        description="How the lab names the token everywhere: its text (a byte-level piece's leading space left out, "
        '"␣" for a blank one), and its index where the same text appears more than once in the run ("a #1", '
        '"a #4")',
        examples=["a #4"],
    )
    id: int = Field(description="Row of the embedding table this token reads")
    special: bool = Field(description="Any of the tokenizer's special ids, typed ones and [UNK] included")
    added: bool = Field(
        description="Put in by the tokenizer around the text ([CLS], [SEP], <s>, </s>), not read from it: "
        "the tokens the page's sink controls hide"
    )
    start: int = Field(
        description="Offset in Unicode code points into the token's segment: `text` for A, `text_pair` for B; "
        "[CLS]/[SEP] have 0, 0"
    )
    end: int
    token_type: int = Field(description="The token type id the model received (BERT: 0 in segment A, 1 in B)")
    segment: Literal["A", "B"] = Field(
        description="Which text the token comes from; [CLS] and the first [SEP] are A, the last [SEP] is B"
    )
    prompt: bool = Field(
        False, description="Read from the model's prompt put before the text (its offsets index the prompt)"
    )


class Progress(BaseModel):
    """How far a long computation is (an atlas's corpus run, an index's passes), on whichever worker sharing the
    store runs it."""

    state: Literal["running", "done", "not running"] = Field(
        description="'done': this worker keeps it; 'not running': known, and nobody waits for it now (it is computed "
        "when asked for, and stops when every client waiting for it has left)"
    )
    done: int = Field(0, description="Slices done (padded passes)")
    total: int = Field(0, description="Slices in all")


class ErrorResponse(BaseModel):
    detail: str


class ValidationErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorResponse(BaseModel):
    """422: one readable sentence first, pydantic's list after it for tools."""

    detail: str
    errors: list[ValidationErrorItem] = []


ComputedIn = Annotated[
    Literal["float32"],
    Field(
        description="What the measure computed in: float32, on the model's own numbers upcast (exactly) where the "
        "model is bfloat16 or float16, a float32 copy of its weights held while the measure runs"
    ),
]


ModelDtype = Annotated[
    Literal["float32", "bfloat16", "float16"], Field(description="What the model's weights and passes are in")
]
