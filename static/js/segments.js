// Which part of the attention a view keeps. Sentence pairs: "AB" keeps queries in segment A looking at
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

// Special-token columns taken out of a matrix (sink modes "hide" and "renormalise"): those cells are
// blanked and their weight per row returned as `sink`, so nothing is silently dropped.
export function withoutSinks(matrix, tokens, mode) {
  if (mode === "show") return { matrix, sink: null };
  const n = tokens.length;
  const sink = new Float32Array(n);
  matrix.forEach((value, cell) => {
    if (tokens[cell % n].special && !Number.isNaN(value)) sink[Math.floor(cell / n)] += value;
  });
  const kept = matrix.map((value, cell) => {
    if (tokens[cell % n].special) return NaN;
    const rest = 1 - sink[Math.floor(cell / n)];
    return mode === "renormalise" && rest > 0 ? value / rest : value;
  });
  return { matrix: kept, sink };
}
