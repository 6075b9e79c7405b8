"""How the lab names a token, in every place it names one: the chips, the heatmap's axes, tooltip and readout,
the attends view, a class question's choices, tally and answer, and the exports. One rule, here only: the
page reads each token's `label` from the run and never recomputes it."""

from collections import Counter


def shown(text: str) -> str:
    """A piece as a label: without the space a byte-level piece carries in front, "␣" for a blank one."""
    return text.strip() or "␣" * len(text)


def token_labels(texts: list[str]) -> list[str]:
    """Each token's label, from the run's pieces in order: its text as shown, and its position where the same
    shown text appears more than once in the run ("a #1", "a #4"), the index of its row and column in the
    heatmap and its readout's A[i,j], so that no two chips, choices, bars or answers read alike."""
    shown_texts = [shown(text) for text in texts]
    counts = Counter(shown_texts)  # one pass: every tokenization of up to 8,192 tokens labels its pieces
    return [text if counts[text] == 1 else f"{text} #{index}" for index, text in enumerate(shown_texts)]
