// A token as a label wherever it is a choice or names a row: its text, and its position when the same text
// appears more than once in the run ("bank #2", "bank #11"), the way predict-first numbers its chips. The
// class server labels a question's choices by the same rule (app/engine/questions.py, token_labels).

// A piece as it reads: without the space a byte-level piece carries in front, "␣" for a blank one.
function shown(text) {
  return text.trim() || "␣".repeat(text.length);
}

export function tokenLabels(tokens) {
  const texts = tokens.map((token) => shown(token.text));
  const counts = new Map();
  for (const text of texts) counts.set(text, (counts.get(text) ?? 0) + 1);
  return texts.map((text, index) => (counts.get(text) === 1 ? text : `${text} #${index}`));
}
