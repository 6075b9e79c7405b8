"""A training's data: its tokenizer, its batches (drawn by a torch.Generator seeded from the spec's seed and the
step, so that a step's batch is the same whichever slice, worker or restart draws it), and the held-out sequences
its heads are scored on.

Recipes:
- "repeats": [prefix o][R][R][R]… with R a block of P random tokens repeating to the end of the sequence, P and o
  drawn per sequence from the trained periods and offsets; the loss is on the predictable tokens only (each repeat
  after the first copy's first token). A fixed period ([R][R] of exactly P tokens, no prefix) is the offset
  shortcut: a head can copy the token P - 1 back without reading any content.
- "corpus": the lab's own texts (the search corpus and the atlas's sentences); "text": a teacher's text. Windows
  of `length` tokens at random places of the text's training lines, every tenth line held out; the loss is on every
  token. Read by a byte-level BPE trained on that text: MiniLM's WordPiece has 30,522 tokens, which would make the
  embedding and unembedding of a 64-wide model 3.9 M weights beside its 33 k in attention, and most of its
  vocabulary never occurs in the lab's corpus; a BPE of 512 learns the corpus's own words and pieces, and,
  byte-level, reads any text typed later (no [UNK]).

Held-out sequences for every recipe: [prefix o][R][R] at periods and offsets never trained on, R's and the prefix's
tokens drawn without replacement so that each token of the second copy has exactly one earlier occurrence (a
perfect induction head then scores 1.0)."""

import hashlib
import itertools
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from app.engine.errors import InvalidInput
from app.engine.training.spec import TrainingSpec

CORPUS = (
    Path(__file__).parent.parent / "data" / "search-corpus.txt",
    Path(__file__).parent.parent / "data" / "atlas-corpus.txt",
)
UNK = "[UNK]"
END = "<|endoftext|>"  # a BPE's one special token: the end of a text
HELD_OUT_OFFSETS = (5, 7, 3)  # the prefixes of the three held-out conditions, never trained on
HELD_OUT_EVERY = 10  # a corpus's every tenth line is held out
TEST_SEQUENCES = 16  # held-out sequences a condition
TEST_SEED = 1234  # the held-out sequences are the same for every training of the same vocabulary
MAX_POSITIONS = 512  # positions a grown model reads (RoPE carries a head past the trained length)
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"


@dataclass(frozen=True)
class Condition:
    """A kind of held-out sequence: [prefix of `offset`][R][R] with R of `period` tokens."""

    period: int
    offset: int
    trained: bool = False  # a fixed period's own condition: shown beside the held-out ones, never judged on

    @property
    def length(self) -> int:
        return self.offset + 2 * self.period

    @property
    def name(self) -> str:
        return f"P={self.period}, o={self.offset}"


def trained_periods(spec: TrainingSpec) -> list[int]:
    if spec.fixed_period:
        return [spec.period]
    held_out = {spec.period - 3, spec.period + 3}
    return [p for p in range(spec.period - spec.spread, spec.period + spec.spread + 1) if p not in held_out]


def trained_offsets(spec: TrainingSpec) -> list[int]:
    if spec.fixed_period:
        return [0]
    return [o for o in range(spec.max_offset + 1) if o not in HELD_OUT_OFFSETS]


def conditions(spec: TrainingSpec) -> list[Condition]:
    """The held-out conditions a training is judged on: periods period - 3 and period + 3 (inside the trained range
    but never drawn) and period + spread + 3 (past it), each at an offset never drawn; a fixed period's own
    condition first."""
    periods = (spec.period - 3, spec.period + 3, spec.period + spec.spread + 3)
    held_out = [Condition(p, o) for p, o in zip(periods, HELD_OUT_OFFSETS, strict=True)]
    return [Condition(spec.period, 0, trained=True), *held_out] if spec.fixed_period else held_out


def longest_test(spec: TrainingSpec) -> int:
    return max(condition.length for condition in conditions(spec))


def generator(*seeds: int) -> torch.Generator:
    """A generator of its own, seeded from the numbers given (never the global one)."""
    key = hashlib.sha256(" ".join(map(str, seeds)).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(key[:8], "little") >> 1)


def syllables(count: int) -> list[str]:
    """`count` readable, distinct tokens for random sequences: ba, be, bi, … then bab, bad, …"""
    open_ = ("".join(pair) for pair in itertools.product(CONSONANTS, VOWELS))
    closed = ("".join(triple) for triple in itertools.product(CONSONANTS, VOWELS, CONSONANTS))
    return list(itertools.islice(itertools.chain(open_, closed), count))


def syllable_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    """Words of a random-token recipe: `vocab` syllables (ids 0..vocab-1, the data's own), then [UNK] for any other
    word typed later."""
    words = {word: index for index, word in enumerate(syllables(vocab))}
    words[UNK] = vocab
    backend = Tokenizer(models.WordLevel(words, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")  # joins words with a space
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=UNK, model_max_length=MAX_POSITIONS)


def bpe_tokenizer(lines: list[str], vocab: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE of `vocab` tokens learnt from `lines` (tokenizers' trainer: the same lines give the same
    merges)."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=[END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(lines, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=END, model_max_length=MAX_POSITIONS)


def corpus_text() -> str:
    return "".join(path.read_text() for path in CORPUS)


def split_lines(text: str) -> tuple[list[str], list[str]]:
    """A text's training lines and held-out lines (every tenth; a text of fewer lines: its last tenth of
    characters), each line with its newline."""
    lines = [line + "\n" for line in text.splitlines() if line.strip()]
    if len(lines) >= HELD_OUT_EVERY:
        return (
            [line for index, line in enumerate(lines) if index % HELD_OUT_EVERY != HELD_OUT_EVERY - 1],
            lines[HELD_OUT_EVERY - 1 :: HELD_OUT_EVERY],
        )
    joined = "".join(lines)
    cut = len(joined) - len(joined) // HELD_OUT_EVERY
    return [joined[:cut]], [joined[cut:]]


class Data:
    """A training's tokenizer, its batch at each step and its held-out sequences."""

    def __init__(self, spec: TrainingSpec):
        self.spec = spec
        if spec.data == "repeats":
            self.tokenizer = syllable_tokenizer(spec.vocab)
            self.train_ids = self.held_out_ids = None
            return
        text = corpus_text() if spec.data == "corpus" else spec.text
        train, held_out = split_lines(text)
        self.tokenizer = bpe_tokenizer(train, spec.vocab)
        self.train_ids = self._ids(train)
        self.held_out_ids = self._ids(held_out)

    def check(self) -> None:
        """InvalidInput for a text too short to learn from: a training sequence and a held-out one at least."""
        if self.train_ids is None:
            return
        need = self.spec.length + 1
        if len(self.train_ids) < need or len(self.held_out_ids) < need:
            raise InvalidInput(
                f"text: read by its BPE, its training lines give {len(self.train_ids):,} tokens and its held-out lines "
                f"(every tenth) {len(self.held_out_ids):,}; each needs {need} (length + 1): a longer text, or a "
                "shorter length"
            )

    def _ids(self, lines: list[str]) -> torch.Tensor:
        ids = self.tokenizer("".join(lines), add_special_tokens=False, verbose=False)["input_ids"]
        return torch.tensor(ids, dtype=torch.long)

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary: the tokenizer's every token ([UNK] included)."""
        return len(self.tokenizer)

    @cached_property
    def random_ids(self) -> torch.Tensor:
        """The ids random sequences are drawn from: every token but the tokenizer's special ones."""
        special = set(self.tokenizer.all_special_ids)
        return torch.tensor([i for i in range(self.vocab_size) if i not in special], dtype=torch.long)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's sequences and their targets, [batch, length] each (-100 where nothing is predicted): the
        same for a step whenever it is drawn."""
        draw = generator(self.spec.seed, step)
        if self.spec.data == "repeats":
            return repeats(self.spec, draw)
        return windows(self.train_ids, self.spec.batch, self.spec.length, draw)

    def held_out(self, condition: Condition) -> torch.Tensor:
        """TEST_SEQUENCES sequences of a condition, [sequence, offset + 2 period]."""
        draw = generator(TEST_SEED, self.vocab_size, condition.period, condition.offset)
        ids = self.random_ids
        first = condition.offset + condition.period
        rows = [ids[torch.randperm(len(ids), generator=draw)[:first]] for _ in range(TEST_SEQUENCES)]
        tokens = torch.stack(rows)
        return torch.cat([tokens, tokens[:, condition.offset :]], dim=1)

    def held_out_text(self) -> torch.Tensor | None:
        """Consecutive windows of the held-out lines, [window, length + 1], at most TEST_SEQUENCES; None for
        repeats."""
        if self.held_out_ids is None:
            return None
        width = self.spec.length + 1
        count = min(TEST_SEQUENCES, len(self.held_out_ids) // width)
        return self.held_out_ids[: count * width].view(count, width)


def repeats(spec: TrainingSpec, draw: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """[prefix o][R][R]… of `spec.length` tokens, P and o drawn per sequence; targets on the predictable tokens
    only: the repeats after the first copy's first token."""
    n, length = spec.batch, spec.length
    tokens = torch.randint(spec.vocab, (n, length), generator=draw)
    periods = torch.tensor(trained_periods(spec))
    offsets = torch.tensor(trained_offsets(spec))
    period = periods[torch.randint(len(periods), (n,), generator=draw)][:, None]  # [sequence, 1]
    offset = offsets[torch.randint(len(offsets), (n,), generator=draw)][:, None]
    position = torch.arange(length)[None, :]  # [1, position]
    repeated = position >= offset + period
    source = torch.where(repeated, offset + (position - offset) % period, position)  # the first copy's token
    tokens = tokens.gather(1, source)
    targets = torch.where(position >= offset + period + 1, tokens, -100)
    return tokens, targets


def windows(ids: torch.Tensor, n: int, length: int, draw: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` windows of `length` tokens at random places of a text; every token a target."""
    starts = torch.randint(len(ids) - length + 1, (n,), generator=draw)
    tokens = torch.stack([ids[start : start + length] for start in starts.tolist()])
    return tokens, tokens.clone()
