// An encoder-decoder's three kinds of attention, as its run (POST /api/analyze) holds them: which tokens are its
// rows and columns, how many blocks it has, and the [row, column] matrix of one block and head (or the mean of
// some heads). attention[kind].weights and .norm: [block][head][row][column], as the server packs them.

export const KINDS = {
  encoder: { name: "encoder self-attention", rows: "source", columns: "source" },
  decoder: { name: "decoder self-attention", rows: "target", columns: "target" },
  cross: { name: "cross-attention", rows: "target", columns: "source" },
};

// The measures an encoder-decoder's run holds, by the view's measure key, and the field of the run that has them.
const FIELDS = { weights: "weights", norm: "norm" };

export function blocksOf(model, kind) {
  return kind === "encoder" ? model.layers : model.decoder_layers;
}

// The state that shows another kind: its block kept where its stack has it, the selected row kept where the rows
// are the same tokens (the target's, for the decoder's and cross-attention), else the first.
export function switchKind({ kind, layer, token }, model, next) {
  const sameRows = KINDS[kind].rows === KINDS[next].rows;
  return { kind: next, layer: Math.min(layer, blocksOf(model, next) - 1), token: sameRows ? token : 0 };
}

export function rowsOf(run, kind) {
  return run[KINDS[kind].rows].tokens;
}

export function columnsOf(run, kind) {
  return run[KINDS[kind].columns].tokens;
}

// Why a measure is not drawn for this run: the run's own sentence (ALTI), or null where it has the numbers.
export function notMeasured(run, measure) {
  if (FIELDS[measure]) return null;
  return run.not_measured?.[measure] ?? `this lab does not compute ${measure} for an encoder-decoder`;
}

// The heads a view reads: one, or those of its mean.
export function headsOf({ head, heads }) {
  return head === "mean" ? heads : [head];
}

// {values: Float32Array of rows × columns, rows, columns}: one head, or the mean of the view's heads.
export function matrixOf(run, { kind, measure, layer, head, heads }) {
  const block = run.attention[kind][FIELDS[measure]][layer];
  const chosen = headsOf({ head, heads });
  const rows = block[0].length;
  const columns = rows ? block[0][0].length : 0;
  const values = new Float32Array(rows * columns);
  for (const h of chosen) {
    block[h].forEach((row, r) => row.forEach((value, c) => (values[r * columns + c] += value / chosen.length)));
  }
  return { values, rows, columns };
}

// "cross-attention, block 1, head 3" (or "mean of 4 heads").
export function viewName({ kind, layer, head, heads }) {
  const which = head === "mean" ? `mean of ${heads.length} head${heads.length === 1 ? "" : "s"}` : `head ${head}`;
  return `${KINDS[kind].name}, block ${layer}, ${which}`;
}
