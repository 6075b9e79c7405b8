"""The engine: one loaded model, what a request may ask of it (its specs, checked), and its runs, computed in
padded passes here and now. It is synchronous and knows nothing of HTTP, caches or queues (app.serving.lab has
those)."""

import threading
from collections import OrderedDict
from functools import cached_property

import torch
from torch import Tensor

from app.engine import names
from app.engine.blocks import BlockCache
from app.engine.capture import (
    Candidates,
    Sequence,
    block_scoring,
    capture_batch,
    final_states,
    head_dim,
)
from app.engine.errors import NEEDS_ADAPTER, InvalidInput, NeedsAdapter, NothingToRead, PassFailed, TextTooLong
from app.engine.families.attention_only import reason
from app.engine.footprint import Footprint, kept_bytes
from app.engine.labels import token_labels
from app.engine.model import LoadedModel
from app.engine.notes import score_notes
from app.engine.patch_sites import SITES, Cell, patching
from app.engine.runs import BLOCK_BYTES, Run, Token
from app.engine.spec import Patch, RunSpec

# Padded tokens per forward pass: a class's short prompts take one pass (48 of about 24 tokens), which for
# MiniLM here costs about twice a 512-token input alone; longer inputs are not padded with short ones.
BATCH_TOKENS = 2048
# The tokens read ahead of their pass (Engine.read_ahead) that an engine keeps for it, in all: 16,384 tokens
# are about 5 MB of Token objects.
READ_AHEAD_TOKENS = 16_384


def sequence(spec: RunSpec, tokens: list[Token]) -> Sequence:
    """What the model reads of a spec's tokens."""
    return Sequence(
        torch.tensor([token.id for token in tokens]), torch.tensor([token.token_type for token in tokens]), spec.mask
    )


def segments(sequence_ids: list[int | None]) -> list[str]:
    """ "A" or "B" per token, by the text it comes from. Special tokens (no text) join the segment before
    them: [CLS] and the first [SEP] are A, the last [SEP] is B. Read from the sequence, not the token type,
    since some tokenizers (RoBERTa's) give B tokens type 0."""
    labels: list[str] = []
    for sequence_id in sequence_ids:
        labels.append("AB"[sequence_id] if sequence_id is not None else labels[-1] if labels else "A")
    return labels


class Engine:
    """One loaded model: what a request may ask of it, and its runs, computed here and now."""

    def __init__(
        self, loaded: LoadedModel, max_chars: int, max_tokens: int | None = None, blocks: BlockCache | None = None
    ):
        """`max_tokens`: the most tokens a run reads (a longer input is cut), below the model's own limit.
        `blocks`: where its runs keep the blocks of weights they compute (one of its own by default)."""
        self.loaded = loaded
        self.blocks = BlockCache(BLOCK_BYTES) if blocks is None else blocks
        self.max_chars = max_chars
        self.max_tokens = min(loaded.max_tokens, max_tokens or loaded.max_tokens)
        self.scoring = block_scoring(loaded.model, loaded.family)  # read once: the modules do not change
        self.weights_bytes = loaded.nbytes  # read once too, for the memory budget (app.serving.models)
        # What its work holds in memory, stated before it runs: what a run keeps read once from one short pass.
        self.footprint = Footprint(loaded, BATCH_TOKENS, kept_bytes(loaded, self.tokenize, self._capture))
        self.info = self._info()  # at start: the health and model endpoints answer on the event loop
        # run id -> its input as read (tokens, truncated), read before its pass (read_ahead), taken by it.
        self._read_ahead: OrderedDict[str, tuple[list[Token], bool]] = OrderedDict()
        self._read_ahead_lock = threading.Lock()  # read on the event loop, taken on a model thread

    def _info(self) -> dict:
        loaded, config, family = self.loaded, self.loaded.model.config, self.loaded.family
        n_heads, n_layers, adapted = config.num_attention_heads, config.num_hidden_layers, not family.attention_only
        poolings = ["last", "mean", "max"] if family.decoder else ["mean", "cls", "max"]
        pipeline = loaded.pipeline
        return {
            "name": loaded.name,
            "kind": "decoder" if family.decoder else "encoder",
            "dtype": loaded.dtype,
            "device": str(loaded.device),
            "family": family.name,
            "attention_only": None if adapted else reason(family.name),
            "capabilities": dict.fromkeys(NEEDS_ADAPTER, adapted),
            "layers": n_layers,
            "heads": n_heads,
            "key_value_heads": getattr(config, "num_key_value_heads", None) or n_heads,
            "hidden_size": config.hidden_size,
            "head_dim": head_dim(config),
            "intermediate_size": family.ffn_size(config) if adapted else None,
            "vocab_size": config.vocab_size,
            "max_tokens": loaded.max_tokens,
            "max_input_tokens": self.max_tokens,
            "max_seq_length": loaded.max_seq_length,
            "decoder": family.decoder,
            "scales": [scoring.scale for scoring in self.scoring] if adapted else [None] * n_layers,
            "windows": [scoring.window for scoring in self.scoring] if adapted else [None] * n_layers,
            "score_notes": score_notes(loaded.model, family, self.scoring),
            # A model without an adapter is read as it masks itself: no other mask can be put in its place.
            "masks": [family.native_mask] if family.decoder or not adapted else ["bidirectional", "causal"],
            "default_mask": family.native_mask,
            "poolings": [*poolings, *[own for own in [loaded.default_pooling] if own not in poolings]],
            "default_pooling": loaded.default_pooling,
            "prompts": pipeline.prompts,
            "default_prompt": pipeline.default_prompt,
            "sentence_modules": pipeline.describe(),
            "normalization": family.normalization,
            "positions": family.positions,
            "ffn": family.ffn(config) if adapted else None,
            "ffn_gated": family.gated_ffn if adapted else None,
            "ffn_activation": family.activation(config) if adapted else None,
            "token_types": family.token_types,
            "position_offset": family.position_offset,
            "next_tokens": loaded.has_lm_head,
            "cannot_write": loaded.cannot_write,
            "logit_softcapping": getattr(config, "final_logit_softcapping", None) if loaded.has_lm_head else None,
            "activations": family.labels(self._recorded(), config) if adapted else {},
            "pair_layout": self._pair_layout(),
        }

    def _pair_layout(self) -> str:
        """How the tokenizer lays out a pair, e.g. "[CLS] A [SEP] B [SEP]" or "<s> A </s></s> B </s>"."""
        tokens, _ = self.tokenize("a", "b")
        parts = [(token.text if token.added else token.segment, token.added) for token in tokens]
        kept = [part for index, (part, added) in enumerate(parts) if added or index == 0 or parts[index - 1][0] != part]
        return " ".join(kept)

    def _recorded(self) -> set[str]:
        """The names this model records, block 0's standing for every block's."""
        tokens, _ = self.tokenize("a")
        spec = RunSpec(self.loaded.name, self.loaded.digest, "a", mask=self.loaded.family.native_mask)
        return set(self._capture([spec], [tokens])[0][0])

    def spec(
        self,
        text: str,
        text_pair: str | None = None,
        mask: str | None = None,
        pooling: str | None = None,
        ablate=(),
        prompt: str | None = None,
        patch: Patch | None = None,
    ) -> RunSpec:
        """The run a request asks for, checked (its length, its mask, the heads it switches off), with the
        mask, pooling and prompt resolved and the heads sorted without repeats, so that equivalent requests
        name one run. `text_pair`: segment B, read with `text` as one input, [CLS] text [SEP] text_pair [SEP].
        `ablate`: (layer, head) pairs whose context is zeroed. `prompt`: one of the model's prompts by name,
        put before the text (None: the model's default prompt, as sentence-transformers applies it; "": none).
        `patch`: input B's activation put into the pass (app.engine.patch_sites); its positions are checked
        against the tokens when the run is read."""
        n_chars = len(text) + len(text_pair or "")
        if n_chars > self.max_chars:
            texts = "the text has" if text_pair is None else "text and text_pair have"
            raise TextTooLong(f"{texts} {n_chars:,} characters; the limit is {self.max_chars:,}")
        info = self.info
        mask = mask or info["default_mask"]
        if mask not in info["masks"]:
            raise InvalidInput(
                f"{info['name']} is a causal decoder ({info['family']}): it reads with the causal mask only"
            )
        if pooling is not None and pooling not in info["poolings"]:
            raise InvalidInput(f"{info['name']} pools with {', '.join(info['poolings'])}, not {pooling}")
        if ablate and info["attention_only"]:
            raise NeedsAdapter(f"heads cannot be switched off: {info['attention_only']}")
        prompt = info["default_prompt"] if prompt is None else prompt or None
        if prompt is not None and prompt not in info["prompts"]:
            offered = ", ".join(info["prompts"]) or "none"
            raise InvalidInput(f"{info['name']} has no prompt {prompt!r}; its prompts: {offered}")
        for layer, head in ablate:
            if not (0 <= layer < info["layers"] and 0 <= head < info["heads"]):
                raise InvalidInput(
                    f"no head ({layer}, {head}) to switch off: layers are 0 to {info['layers'] - 1}, "
                    f"heads 0 to {info['heads'] - 1}"
                )
        if patch is not None:
            self._check_patch(patch, text_pair, info)
        return RunSpec(
            model=self.loaded.name,
            model_digest=self.loaded.digest,
            text=text,
            text_pair=text_pair,
            mask=mask,
            pooling=pooling or self.loaded.default_pooling,
            ablated=tuple(sorted({(layer, head) for layer, head in ablate})),
            prompt=prompt,
            patch=patch,
        )

    def _check_patch(self, patch: Patch, text_pair: str | None, info: dict) -> None:
        if info["attention_only"]:
            raise NeedsAdapter(f"nothing can be patched: {info['attention_only']}")
        if text_pair is not None:
            raise InvalidInput("a patched run reads one text: give no text_pair")
        if len(patch.source) > self.max_chars:
            raise TextTooLong(
                f"the patch's source has {len(patch.source):,} characters; the limit is {self.max_chars:,}"
            )
        if patch.site not in SITES:
            raise InvalidInput(f"no site {patch.site!r}: the sites are {', '.join(SITES)}")
        if not 0 <= patch.layer < info["layers"]:
            raise InvalidInput(f"no block {patch.layer} to patch: blocks are 0 to {info['layers'] - 1}")
        if (patch.site == "head") != (patch.head is not None) or not 0 <= (patch.head or 0) < info["heads"]:
            raise InvalidInput(f"the head site, and it only, takes a head: 0 to {info['heads'] - 1}")
        if (
            not patch.positions
            or len(patch.positions) != len(patch.sources)
            or len(set(patch.positions)) < len(patch.positions)
        ):
            raise InvalidInput("a patch pairs positions with sources one to one: as many of each, no repeats")

    def compute(self, spec: RunSpec) -> Run:
        """One forward pass of the spec, and the pooling's own where it reads a shorter input: a whole run,
        computed here and now and kept nowhere (a server keeps and shares runs, app.serving.lab)."""
        (outcome,) = self.compute_batch([spec])
        if isinstance(outcome, Exception):
            raise outcome
        return self.with_sentence_vector(outcome)

    def with_sentence_vector(self, run: Run) -> Run:
        """The run with its sentence vector: itself, or, where its pooling pass is due, a new Run with it."""
        return run.with_pooled_output(self.pooling_pass(run)) if run.pooling_pass_due else run

    def pooling_pass(self, run: Run) -> Tensor:
        """The last hidden states of the run's input cut where the model's own pooling cuts it (its
        max_seq_length), as sentence-transformers encodes it: the sentence vector of a longer input. A pass
        of its own, which compute_batch leaves for when the vector is asked for: at 512 tokens it is about 60%
        of the first pass, and the attention views do not need it."""
        cut, _ = self.tokenize(run.spec.text, run.spec.text_pair, self.loaded.max_seq_length, run.spec.prompt)
        return final_states(self.loaded.model, self.loaded.family, sequence(run.spec, cut), run.spec.ablated)

    def compute_batch(self, specs: list[RunSpec], max_tokens: int = BATCH_TOKENS) -> list[Run | Exception]:
        """The runs of several specs, each as if computed alone (to float rounding): padded passes of
        similar lengths, at most `max_tokens` padded tokens each, one pass per set of switched-off heads.
        A spec the model cannot read gets its exception in its place; the others are computed. A run whose
        pooling reads a shorter input has its pooling pass due (pooling_pass). A model without an adapter
        reads one input per pass: how it would read padding is not known."""
        if self.loaded.family.attention_only:
            max_tokens = 0
        outcomes: list[Run | Exception | None] = [None] * len(specs)
        inputs = {}
        for index, spec in enumerate(specs):
            try:
                inputs[index] = self._read(spec)
            except InvalidInput as error:
                outcomes[index] = error
        # Sorted by length, so that a pass pads little; a long input does not drag short ones with it.
        # One pass per set of switched-off heads and patch: a patch's source rides along in its pass.
        kind = lambda index: (specs[index].ablated, repr(specs[index].patch))  # noqa: E731
        order = sorted(inputs, key=lambda index: (kind(index), len(inputs[index][0])))
        for group in batches(order, kind, lambda index: len(inputs[index][0]), max_tokens):
            try:
                runs = self._forward([specs[index] for index in group], [inputs[index] for index in group])
            except Exception as error:
                failed = PassFailed(
                    f"the model failed on this text ({type(error).__name__}); try again or change the text"
                )
                failed.__cause__ = error
                runs = [failed] * len(group)
            for index, run in zip(group, runs, strict=True):
                outcomes[index] = run
        return outcomes

    def read_ahead(self, spec: RunSpec) -> int:
        """How many tokens the spec's input is, as read (length), for a server that states a pass's memory before
        its turn: its tokens are kept for its pass (_read), which would otherwise read the input again, on the
        pass's thread. The READ_AHEAD_TOKENS most recently read are kept."""
        with self._read_ahead_lock:
            found = self._read_ahead.get(spec.run_id)
        if found is None:
            found = self.tokenize(spec.text, spec.text_pair, prompt=spec.prompt)
            with self._read_ahead_lock:
                self._read_ahead[spec.run_id] = found
                kept = sum(len(tokens) for tokens, _ in self._read_ahead.values())
                while kept > READ_AHEAD_TOKENS and len(self._read_ahead) > 1:
                    kept -= len(self._read_ahead.popitem(last=False)[1][0])
        return len(found[0])

    def _read(self, spec: RunSpec) -> tuple[list[Token], bool]:
        """The spec's tokens, and whether the input was cut; InvalidInput if the model cannot read it."""
        with self._read_ahead_lock:
            ahead = self._read_ahead.pop(spec.run_id, None)
        tokens, truncated = ahead or self.tokenize(spec.text, spec.text_pair, prompt=spec.prompt)
        read = {token.segment for token in tokens if token.end > token.start and not token.prompt}
        unreadable = "has no characters the tokenizer keeps (only control or invisible ones)"
        if "A" not in read:
            raise NothingToRead(f"the text {unreadable}")
        if spec.text_pair is not None and "B" not in read:
            raise NothingToRead(f"text_pair {unreadable}")
        # A BERT tokenizer makes B tokens type 1 even for a model folder trained with one token type.
        type_vocab_size = getattr(self.loaded.model.config, "type_vocab_size", 1)
        if self.loaded.family.token_types and max(token.token_type for token in tokens) >= type_vocab_size:
            raise InvalidInput("this model was trained without a segment B (one token type): analyze the text alone")
        if spec.patch is not None:
            self._source(spec, tokens)
        return tokens, truncated

    def _source(self, spec: RunSpec, tokens: list[Token]) -> Sequence:
        """A patched run's source, input B, as the model reads it; InvalidInput where the patch's positions
        are not the run's and B's, or where the run's sentence vector would need a pass of its own."""
        source, _ = self.tokenize(spec.patch.source, None, self.loaded.max_seq_length)
        if len(tokens) > self.loaded.max_seq_length:
            raise InvalidInput(f"a patched run reads at most {self.loaded.max_seq_length} tokens, its pooling's length")
        if (
            max(spec.patch.positions) >= len(tokens)
            or max(spec.patch.sources) >= len(source)
            or min((*spec.patch.positions, *spec.patch.sources)) < 0
        ):
            raise InvalidInput(
                f"the patch's positions are outside the inputs: the run has {len(tokens)} tokens, its source "
                f"{len(source)}"
            )
        return sequence(spec, source)

    def _forward(self, specs: list[RunSpec], inputs: list[tuple[list[Token], bool]]) -> list[Run]:
        """One padded pass of specs that switch off the same heads and take the same patch."""
        captured = self._capture(specs, [tokens for tokens, _ in inputs])
        config = self.loaded.model.config
        # What the pooling reads: the last block's output, normalised once more in a pre-norm model.
        final = names.block(config.num_hidden_layers - 1, "output")
        last = lambda found: names.FINAL if names.FINAL in found else final  # noqa: E731
        runs = []
        for spec, (tokens, truncated), (activations, candidates, padded) in zip(specs, inputs, captured, strict=True):
            pooled_whole = len(tokens) <= self.loaded.max_seq_length
            runs.append(
                Run(
                    spec=spec,
                    tokens=tokens,
                    truncated=truncated,
                    activations=activations,
                    pooled_output=activations[last(activations)] if pooled_whole else None,
                    n_layers=config.num_hidden_layers,
                    n_heads=config.num_attention_heads,
                    family=self.loaded.family,
                    scoring=self.scoring,
                    next_tokens=candidates,
                    pipeline=self.loaded.pipeline,
                    prompt_tokens=self.prompt_length(spec.prompt),
                    blocks=self.blocks,
                    padded_to=padded,
                )
            )
        return runs

    def _capture(
        self, specs: list[RunSpec], inputs: list[list[Token]]
    ) -> list[tuple[dict[str, Tensor], Candidates | None, int | None]]:
        """Each spec's activations and next-token candidates from one padded pass, and the pass's padded length
        where the pass handed on the weights it made for a row it padded (Run.padded_to), else None."""
        sequences = [sequence(spec, tokens) for spec, tokens in zip(specs, inputs, strict=True)]
        patch = specs[0].patch
        if patch is not None:  # the source goes last in the pass (app.engine.patch_sites)
            sequences.append(self._source(specs[0], inputs[0]))
        longest = max(len(each.input_ids) for each in sequences)
        padded: list[int | None] = [None] * len(specs)

        def made(row: int, layer: int, weights: Tensor) -> None:
            """The weights an eager pass makes anyway go to the block cache (a patch's source row is no run)."""
            if row < len(specs):
                self.blocks.put(specs[row].run_id, layer, weights)
                if len(inputs[row]) < longest:
                    padded[row] = longest

        if patch is None:
            captured = capture_batch(self.loaded.model, self.loaded.family, sequences, specs[0].ablated, made)
        else:
            # Each row before the source takes its value at the site.
            cell = Cell(patch.site, patch.layer, patch.head, patch.positions, patch.sources)
            with patching(self.loaded.model, self.loaded.family, [cell] * len(specs), 0, len(specs)):
                captured = capture_batch(self.loaded.model, self.loaded.family, sequences, specs[0].ablated, made)
        return [(*found, padded_to) for found, padded_to in zip(captured[: len(specs)], padded, strict=True)]

    def tokenize(
        self, text: str, text_pair: str | None = None, max_length: int | None = None, prompt: str | None = None
    ) -> tuple[list[Token], bool]:
        """The input as the tokenizer makes it ([CLS] text [SEP] text_pair [SEP] for BERT, <s> … </s> for
        RoBERTa, the bare pieces for GPT-2), cut at max_length tokens (by default
        max_tokens: the model's positions, or the lab's lower limit).
        A pair too long loses tokens from the end of whichever side is longer ("longest_first").
        `prompt`: one of the model's prompts by name, its text put before `text` as sentence-transformers
        puts it; the tokens read from it are marked, their offsets index the prompt and the others' the text."""
        tokenizer = self.loaded.tokenizer
        before = self.loaded.pipeline.prompts[prompt] if prompt is not None else ""
        encoding = tokenizer(
            before + text,
            text_pair,
            truncation=True,
            max_length=max_length or self.max_tokens,
            return_offsets_mapping=True,
            # More than one window means something was cut; the fast tokenizer makes windows for pairs too,
            # and the first is the same encoding as without this flag.
            return_overflowing_tokens=True,
            return_token_type_ids=True,
        )
        ids = encoding["input_ids"][0]
        special_ids = set(tokenizer.all_special_ids)
        sequence_ids = encoding.sequence_ids(0)  # None for the tokens the tokenizer added around the texts
        # Offsets of B tokens index text_pair: the fast tokenizer gives offsets per sequence.
        pieces = self.pieces(ids)
        tokens = []
        for index, (piece, label, token_id, sequence_id, (start, end), token_type, segment) in enumerate(
            zip(
                pieces,
                token_labels(pieces),
                ids,
                sequence_ids,
                encoding["offset_mapping"][0],
                encoding["token_type_ids"][0],
                segments(sequence_ids),
                strict=True,
            )
        ):
            from_prompt = sequence_id == 0 and start < len(before)
            if sequence_id == 0 and not from_prompt:
                start, end = start - len(before), end - len(before)
            added = sequence_id is None
            tokens.append(
                Token(
                    index,
                    piece,
                    label,
                    token_id,
                    token_id in special_ids,
                    added,
                    start,
                    end,
                    token_type,
                    segment,
                    from_prompt,
                )
            )
        return tokens, len(encoding["input_ids"]) > 1

    def prompt_length(self, prompt: str | None) -> int:
        """The prompt's tokens as sentence-transformers counts them for a Pooling that leaves them out: the
        prompt tokenized alone, less a special token the tokenizer puts at its end. 0 without a prompt."""
        if prompt is None:
            return 0
        ids = self.loaded.tokenizer(self.loaded.pipeline.prompts[prompt])["input_ids"]
        return len(ids) - (1 if ids and ids[-1] in self.loaded.tokenizer.all_special_ids else 0)

    def pieces(self, ids: list[int]) -> list[str]:
        """Each token as a person reads it: WordPiece's own pieces ("##s" continues a word), and for byte-level
        and SentencePiece vocabularies the text a piece stands for (" cat", not "Ġcat" or "▁cat")."""
        tokenizer = self.loaded.tokenizer
        pieces = tokenizer.convert_ids_to_tokens(ids)
        if type(tokenizer.backend_tokenizer.decoder).__name__ in ("WordPiece", "NoneType"):
            return pieces
        special = set(tokenizer.all_special_tokens)
        read = [piece if piece in special else tokenizer.convert_tokens_to_string([piece]) for piece in pieces]
        # A piece holding part of a character's bytes reads as nothing: it keeps its own spelling.
        return [piece if "\ufffd" in text else text for piece, text in zip(pieces, read, strict=True)]

    def length(self, spec: RunSpec) -> int:
        """How many tokens the spec's input is, as read (cut at max_tokens)."""
        before = self.loaded.pipeline.prompts[spec.prompt] if spec.prompt is not None else ""
        encoding = self.loaded.tokenizer(
            before + spec.text, spec.text_pair, truncation=True, max_length=self.max_tokens
        )
        return len(encoding["input_ids"])

    @cached_property
    def unit_embedding_table(self) -> Tensor:
        """The word-embedding table with rows scaled to length 1: cosines to it are one matrix product."""
        table = self.loaded.model.get_input_embeddings().weight.detach()
        return table / table.norm(dim=1, keepdim=True)


def batches(order: list, key, length, max_tokens: int) -> list[list]:
    """Consecutive items of `order` (sorted by key, then length) in groups of one key each, each group's
    padded size (its count times its longest length) at most max_tokens; an item alone may pass it."""
    groups: list[list] = []
    for item in order:
        group = groups[-1] if groups else None
        if group and key(group[0]) == key(item) and (len(group) + 1) * length(item) <= max_tokens:
            group.append(item)
        else:
            groups.append([item])
    return groups
