"""A run named by what it is: everything that changes its numbers in one frozen spec, whose hash is the id."""

import base64
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from functools import cached_property

# 128 bits of sha256 in lowercase base32 without padding: 26 characters, safe in a URL path.
RUN_ID = re.compile(r"[a-z2-7]{26}")


@dataclass(frozen=True)
class Patch:
    """Input B's activation put into a run's pass (app.engine.patch_sites): at `site` of block `layer` (head
    `head` for the head site), at the run's `positions` from B's `sources`, pairwise."""

    source: str  # input B's text, read as the run's text is (its pooling's length, no pair)
    site: str
    layer: int
    head: int | None
    positions: tuple[int, ...]
    sources: tuple[int, ...]


@dataclass(frozen=True)
class RunSpec:
    """The only description of a run. Two requests with the same spec are the same run, on any worker,
    replica or restart: the lab recomputes the numbers from it whenever it does not hold them."""

    model: str  # the model's name, e.g. sentence-transformers/all-MiniLM-L6-v2
    model_digest: str  # sha256 of its weights, config and tokenizer: the name alone does not fix the numbers
    text: str
    text_pair: str | None = None  # segment B, read with `text` as one input
    mask: str = "bidirectional"
    pooling: str = "mean"  # resolved: never "the model's default"
    ablated: tuple[tuple[int, int], ...] = ()  # (layer, head) pairs switched off, sorted, no repeats
    prompt: str | None = None  # the model's prompt (by name) put before `text`: resolved, as the pooling is
    patch: Patch | None = None  # an activation of another input put into this run's pass

    # Fields added after runs were named: left out of the canonical text while unset, so that a run made
    # before them keeps its id.
    LATER = ("prompt", "patch")

    @cached_property
    def run_id(self) -> str:
        digest = hashlib.sha256(self.canonical().encode()).digest()[:16]
        return base64.b32encode(digest).decode().rstrip("=").lower()

    def canonical(self) -> str:
        """Sorted-keys JSON of every field: the text its id is the hash of, and what the store keeps."""
        fields = {key: value for key, value in asdict(self).items() if key not in self.LATER or value is not None}
        return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_canonical(cls, canonical: str) -> "RunSpec":
        fields = json.loads(canonical)
        patch = fields.get("patch")
        if patch is not None:
            patch = Patch(**{**patch, "positions": tuple(patch["positions"]), "sources": tuple(patch["sources"])})
        return cls(**{**fields, "ablated": tuple(tuple(pair) for pair in fields["ablated"]), "patch": patch})


@dataclass(frozen=True)
class AtlasSpec:
    """The only description of a head atlas (app.engine.atlas): the model, the corpus and the generated
    repeated sequences. Its hash is the atlas id, kept in the spec store beside the runs' ids."""

    model: str
    model_digest: str
    sentences: tuple[str, ...]  # one sentence per item, as given (each read up to atlas.MAX_TOKENS tokens)
    repeats: int = 32  # random-token sequences, each read twice in a row, for the induction score
    repeat_length: int = 24  # tokens in one copy
    seed: int = 0  # the random tokens' generator
    # The first sentences each head is switched off on: each costs MiniLM 12 × 21 block passes (every head of
    # a block from that block on), about a twelfth of the 500-sentence corpus's own pass; 4 keeps the corpus run
    # within 1.5× its raw passes (bench/README.md).
    ablation_sentences: int = 4
    mask: str = "bidirectional"  # resolved: the model's own unless asked (an encoder may read causally)

    @cached_property
    def run_id(self) -> str:
        """The atlas id: the store keeps specs by this name whatever they describe."""
        digest = hashlib.sha256(self.canonical().encode()).digest()[:16]
        return base64.b32encode(digest).decode().rstrip("=").lower()

    def canonical(self) -> str:
        return json.dumps({"atlas": asdict(self)}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class IndexSpec:
    """The only description of a search index (app.engine.search): the model, the documents and how each is
    read. Its hash is the index id, kept in the spec store beside the runs' and the atlases' ids. The
    approximate index built over its vectors is not in it: usearch builds the same graph from the same
    vectors and knobs (single-threaded), so it is a cache entry named by the id and the knobs."""

    model: str
    model_digest: str
    documents: tuple[str, ...]  # one document per item, as given (each read up to the pooling's length)
    prompt: str | None = None  # the model's prompt (by name) put before every document: resolved, None for none
    prefix: str = ""  # a typed prefix put before every document, read as part of its text ("passage: ")

    @cached_property
    def run_id(self) -> str:
        """The index id: the store keeps specs by this name whatever they describe."""
        digest = hashlib.sha256(self.canonical().encode()).digest()[:16]
        return base64.b32encode(digest).decode().rstrip("=").lower()

    def canonical(self) -> str:
        return json.dumps({"index": asdict(self)}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class WritingSpec:
    """The only description of a writing (app.engine.writing): the model, the prompt and the knobs by
    transformers' names, a knob left None being the model's own generation_config's. The same spec writes the
    same tokens on any worker (the draws come from a generator seeded with `seed`), so its hash is the writing
    id a follower names it by, kept in the spec store beside the runs'."""

    model: str
    model_digest: str
    text: str
    max_new_tokens: int = 20
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    @cached_property
    def run_id(self) -> str:
        """The writing id: the store keeps specs by this name whatever they describe."""
        digest = hashlib.sha256(self.canonical().encode()).digest()[:16]
        return base64.b32encode(digest).decode().rstrip("=").lower()

    def canonical(self) -> str:
        return json.dumps({"writing": asdict(self)}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class EncoderDecoderSpec:
    """The only description of an encoder-decoder's run (app.engine.encoder_decoder): the model, the source, and the
    target, given or (None) written greedily by the model, at most `max_new_tokens` tokens. Its hash is the run id."""

    model: str
    model_digest: str
    source: str
    target: str | None = None
    max_new_tokens: int | None = None  # a written target's bound; None for a given target

    @cached_property
    def run_id(self) -> str:
        digest = hashlib.sha256(self.canonical().encode()).digest()[:16]
        return base64.b32encode(digest).decode().rstrip("=").lower()

    def canonical(self) -> str:
        return json.dumps({"encoder_decoder": asdict(self)}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def from_canonical(canonical: str) -> RunSpec | AtlasSpec | IndexSpec | WritingSpec | EncoderDecoderSpec:
    """What the store keeps under an id: a run's spec, an atlas's, an index's, a writing's or an encoder-decoder
    run's."""
    fields = json.loads(canonical)
    if "encoder_decoder" in fields:
        return EncoderDecoderSpec(**fields["encoder_decoder"])
    if "writing" in fields:
        return WritingSpec(**fields["writing"])
    if "atlas" in fields:
        atlas = fields["atlas"]
        return AtlasSpec(**{**atlas, "sentences": tuple(atlas["sentences"])})
    if "index" in fields:
        index = fields["index"]
        return IndexSpec(**{**index, "documents": tuple(index["documents"])})
    return RunSpec.from_canonical(canonical)
