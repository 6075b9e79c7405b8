"""How the lab names a token, in every place it names one: the chips, the heatmap's axes, tooltip and readout,
the attends view, a class question's choices, tally and answer, and the exports. One rule, here only: the
page reads each token's `label` from the run and never recomputes it."""

from collections import Counter

# A byte-level vocabulary (GPT-2's) has a piece for each control byte: as text most draw nothing at all, so a
# choice, chip or bar would read blank. Each is spelled by its byte as SentencePiece spells its byte pieces
# ("<0x7F>"): every font draws that, where the Unicode control pictures are missing from many. Those Python counts
# as space (tab, line feeds, \x1c-\x1f) are blanks, "␣".
CONTROL_BYTES = {code: f"<0x{code:02X}>" for code in [*range(0x20), 0x7F] if not chr(code).isspace()}


def shown(text: str) -> str:
    """A piece as a label: without the space a byte-level piece carries in front, "␣" for a blank one, a control
    character's byte for one (CONTROL_BYTES)."""
    return text.translate(CONTROL_BYTES).strip() or "␣" * len(text)


def token_labels(texts: list[str]) -> list[str]:
    """Each token's label, from the run's pieces in order: its text as shown, and its position where the same
    shown text appears more than once in the run ("a #1", "a #4"), the index of its row and column in the
    heatmap and its readout's A[i,j], so that no two chips, choices, bars or answers read alike."""
    shown_texts = [shown(text) for text in texts]
    counts = Counter(shown_texts)  # one pass: every tokenization of up to 8,192 tokens labels its pieces
    return [text if counts[text] == 1 else f"{text} #{index}" for index, text in enumerate(shown_texts)]
