"""A cross-encoder: a transformer with a sequence-classification head of one label, reading a query and a
document as one input ([CLS] query [SEP] document [SEP]) and giving their relevance, as sentence-transformers'
CrossEncoder saves and predicts it: the label's logit through the folder's activation (a torch.nn module,
read where sentence-transformers wrote it: saved_activation; Sigmoid where it names none). One pass per pair:
it re-ranks a bi-encoder's top k, it cannot search a corpus."""

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from app.engine.engine import BATCH_TOKENS, batches
from app.engine.model import ModelLoadError
from app.engine.sentence import PipelineError, torch_activation

SIGMOID = "torch.nn.modules.activation.Sigmoid"


@dataclass(frozen=True)
class CrossEncoder:
    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    activation: torch.nn.Module  # applied to the logit
    max_length: int

    def read(self, query: str, documents: list[str]) -> list[list[int]]:
        """Each (query, document) pair's ids, cut at max_length as CrossEncoder cuts them (longest first)."""
        encoded = self.tokenizer([query] * len(documents), documents, truncation=True, max_length=self.max_length)
        return encoded["input_ids"]

    def score_slices(self, query: str, documents: list[str]) -> Iterator[Callable]:
        """The relevance of each document to the query, in padded passes of at most BATCH_TOKENS tokens (one a
        slice, app.serving.work); the last slice returns them in the documents' order."""
        ids = self.read(query, documents)
        order = sorted(range(len(ids)), key=lambda index: len(ids[index]))
        scores: list[float] = [0.0] * len(ids)

        def score(group: list[int]) -> None:
            encoded = self.tokenizer(
                [query] * len(group),
                [documents[index] for index in group],
                truncation=True,
                max_length=self.max_length,
                padding=True,
                return_tensors="pt",
            )
            with torch.inference_mode():
                relevance = self.activation(self.model(**encoded).logits[:, 0])
            for index, value in zip(group, relevance.tolist(), strict=True):
                scores[index] = value

        for group in batches(order, lambda _: 0, lambda index: len(ids[index]), BATCH_TOKENS):
            yield lambda group=group: score(group)
        yield lambda: scores

    def pass_bytes(self, pairs: int, tokens: int) -> int:
        """One padded pass's peak, stated before it starts: its attention's scores and weights, its FFN's inner
        rows and a few hidden states per block, one block at a time."""
        config = self.model.config
        batch = min(pairs, max(1, BATCH_TOKENS // tokens))
        inner = getattr(config, "intermediate_size", None) or 4 * config.hidden_size
        return batch * tokens * (3 * config.num_attention_heads * tokens + 3 * inner + 8 * config.hidden_size) * 4


def load_cross_encoder(folder: Path) -> CrossEncoder:
    """A cross-encoder folder as save_pretrained (or CrossEncoder.save) writes it: one label, a fast tokenizer."""
    if not folder.is_dir():
        raise ModelLoadError(f"cross-encoder folder {folder} does not exist")
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"{folder} is not a cross-encoder folder: it has no config.json")
    try:
        model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{folder} could not be read as a cross-encoder: {error}") from error
    if model.config.num_labels != 1:
        raise ModelLoadError(
            f"{folder} has {model.config.num_labels} labels: a cross-encoder that scores relevance has one"
        )
    try:
        activation = torch_activation(saved_activation(folder), what=f"{folder}: the cross-encoder's activation")
    except PipelineError as error:
        raise ModelLoadError(str(error)) from error
    positions = getattr(model.config, "max_position_embeddings", None) or tokenizer.model_max_length
    return CrossEncoder(folder.name, model, tokenizer, activation, min(tokenizer.model_max_length, positions))


def saved_activation(folder: Path) -> str:
    """The activation's class path where each sentence-transformers version saves it, read in the order
    CrossEncoder reads them: config_sentence_transformers.json's `activation_fn` (5.4 on), config.json's
    `sentence_transformers.activation_fn` (4.0 to 5.3), config.json's `sbert_ce_default_activation_function`
    (before 4.0); Sigmoid where none names one, CrossEncoder's default for one label."""
    config = _json_object(folder / "config.json")
    for value in (
        _json_object(folder / "config_sentence_transformers.json").get("activation_fn"),
        (config.get("sentence_transformers") or {}).get("activation_fn"),
        config.get("sbert_ce_default_activation_function"),
    ):
        if value:
            return value
    return SIGMOID


def _json_object(path: Path) -> dict:
    """A JSON file's object; {} where there is no such file."""
    if not path.is_file():
        return {}
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{path} could not be read: {error}") from error
    if not isinstance(found, dict):
        raise ModelLoadError(f"{path} is not a JSON object")
    return found
