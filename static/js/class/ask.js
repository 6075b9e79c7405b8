// What the teacher asks, built from the view on screen: the server builds the choices and computes the
// answer from the run's own numbers (app/engine/questions.py); the page sends only what to ask.

// kind: "attends" (which token does the selected token attend to most, in this exact view: block or every
// block's mean, head or head set, measure, filters), "head" (which head of this block does `pattern` most),
// "next_token" (what the LM head writes after the selected token). step: {index, title} of a lesson plan's
// step, or null; text: the teacher's own wording, or null for the server's.
export function questionAsk(kind, state, { pattern = "previous", step = null, text = null } = {}) {
  const run_id = state.run.run_id;
  if (kind === "head") return { kind, run_id, layer: state.layer, pattern, step, text };
  if (kind === "next_token") return { kind, run_id, token: state.token, step, text };
  return {
    kind,
    run_id,
    token: state.token,
    layer: state.layer,
    head: state.head,
    ...(state.head === "mean" ? { heads: state.heads } : {}),
    block_mean: state.blockMean,
    measure: state.measure,
    sinks: state.sinks,
    segments: state.segments,
    step,
    text,
  };
}

// Why this kind cannot be asked of this view, or null when it can.
export function cannotAsk(kind, state, model) {
  if (!state.run) return "Run a prompt first.";
  if (kind === "next_token" && !model.next_tokens) return `${model.name} has no language-model head: it predicts no next token.`;
  if ((kind === "attends" || kind === "next_token") && state.token === null) return "Select a token first: the question is about it.";
  return null;
}
