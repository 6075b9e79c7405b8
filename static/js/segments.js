// Sentence pairs: which part of the attention a view keeps. "AB" keeps queries in segment A looking at
// keys in segment B (bertviz's sentence-A/B view); "all" keeps everything.

export function segmentRule(segments) {
  return segments === "all" ? null : { from: segments[0], to: segments[1] };
}

// The matrix with every cell outside the rule blanked (NaN), so the view shows it as empty, not as 0.
export function filterMatrix(matrix, tokens, rule) {
  if (rule === null) return matrix;
  const n = tokens.length;
  return matrix.map((value, cell) =>
    tokens[Math.floor(cell / n)].segment === rule.from && tokens[cell % n].segment === rule.to ? value : NaN,
  );
}
