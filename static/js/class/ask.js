// What the teacher asks, built from the view on screen: the server builds the choices and computes the
// answer from the run's own numbers (app/engine/questions.py); the page sends only what to ask.

// kind: "attends" (which token does the selected token attend to most, in this exact view: block or every
// block's mean, head or head set, measure, filters), "head" (which head of this block does `pattern` most),
// "next_token" (what the LM head writes after the selected token), "patch-head" and "patch-position" (which
// head of this block, at the selected token or every token, or which token before this block, taken from
// input B `source`, moves the output furthest towards B's), "search" (which document of index `indexId` comes
// first for the prompt read as a query, after the typed `prefix`, among `documents` by line or, for null, the
// ranking's first four), "grown_head" (which head of the induction recipe the lab grows will become its
// induction head), "loss_drop" (in which range of its steps the recipe's loss will drop), "written" (which token
// a writing of the prompt, by `writing`'s knobs, writes at its step `index`: the choices that step's likeliest
// candidates), "temperature" (with which of `temperatures` the step's `rank`th likeliest candidate is likelier),
// "cross_attends" (an encoder-decoder's: which source token the selected target token reads most in
// cross-attention, in this block and head or head set, under this measure).
// step: {index, title} of a lesson plan's step, or null; text: the teacher's own wording, or null for the server's; test: "pre" or "post" for a test (one
// round, answered alone), or null for rounds.
export function questionAsk(kind, state, { pattern = "previous", source = "", indexId = null, prefix = "", documents = null, writing = {}, index = 0, rank = 1, temperatures = [0.2, 1.5], step = null, text = null, test = null } = {}) {
  if (kind === "grown_head" || kind === "loss_drop") return { kind, train_id: null, step, text }; // the induction recipe's, started or not
  const written = { ...writing, model: state.model, text: state.text };
  if (kind === "written") return { kind, writing: written, index, step, text, test };
  if (kind === "temperature") return { kind, writing: written, index, rank, temperatures, step, text, test };
  const run_id = state.run.run_id;
  if (kind === "search") return { kind, run_id, index_id: indexId, prefix, documents, step, text, test };
  if (kind === "head") return { kind, run_id, layer: state.layer, pattern, step, text, test };
  if (kind === "patch-head") return { kind: "patch", by: "head", run_id, source, layer: state.layer, token: state.token, step, text, test };
  if (kind === "patch-position") return { kind: "patch", by: "position", run_id, source, layer: state.layer, step, text, test };
  if (kind === "next_token") return { kind, run_id, token: state.token, step, text, test };
  if (kind === "cross_attends") {
    const heads = state.head === "mean" ? { heads: state.heads } : {};
    return { kind, run_id, token: state.token, layer: state.layer, head: state.head, ...heads, measure: state.measure, step, text, test };
  }
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
    test,
  };
}

// Why this kind cannot be asked of this view, or null when it can.
export function cannotAsk(kind, state, model) {
  if ((kind === "written" || kind === "temperature") && model.cannot_write) return model.cannot_write;
  if (!state.run) return "Run a prompt first.";
  // An encoder-decoder's run is a source and a target: the one question asked of it is cross-attention's.
  const pair = model.kind === "encoder-decoder";
  if (kind === "cross_attends" && !pair) return `${model.name} reads one text: which source token a target token reads is asked of an encoder-decoder (T5, BART, Marian).`;
  if (pair && !["cross_attends", "written", "temperature"].includes(kind)) return `${model.name} is an encoder-decoder: ask which source token a target token reads most.`;
  if (kind === "cross_attends" && state.kind !== "cross") return "Show cross-attention first: the question is about a target token's row over the source.";
  if (kind === "cross_attends" && state.token === null) return "Select a target token first: the question is about its row.";
  if (kind === "next_token" && !model.next_tokens) return `${model.name} has no language-model head: it predicts no next token.`;
  if ((kind === "attends" || kind === "next_token") && state.token === null) return "Select a token first: the question is about it.";
  if (kind.startsWith("patch") && state.run.patch) return "This run is itself patched: run the text again unpatched first.";
  return null;
}
