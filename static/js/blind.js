// Blind voting. While a class question is open or its votes are shown, no page draws the numbers it asks
// about: the server's question phase decides (state.question, the class's QuestionState as the server sent
// it; null outside a class or before a question), never the page's own idea of it. Once revealed, every
// view is drawn again, with the answer marked where the view on screen is the one the question was asked in.

import { el } from "./format.js";
import { isPerBlock } from "./matrix.js";
import { byId } from "./root.js";

export function blind({ question }) {
  return Boolean(question) && question.phase !== "revealed";
}

export const BLANK_NOTE = "Hidden while the class votes: the numbers come back at Reveal.";

// A view's blank (views.js): its element holds one line saying why it is empty.
export function blankNote(id) {
  return () => byId(id).replaceChildren(el("p", { class: "hint" }, BLANK_NOTE));
}

// The key token a revealed "which token does it attend to most" question answers, when the view on screen
// is exactly the view it was asked in (run, token, block, head or head set, measure, filters); else null.
export function revealedKey(state) {
  const { question, run } = state;
  if (!question || question.phase !== "revealed" || question.kind !== "attends" || !run) return null;
  const asked = question.view;
  const sameHeads =
    isPerBlock(asked.measure) ||
    (asked.head === "mean"
      ? state.head === "mean" && [...state.heads].sort((a, b) => a - b).join() === [...asked.heads].sort((a, b) => a - b).join()
      : state.head === asked.head);
  const same =
    run.run_id === asked.run_id &&
    state.token === asked.token &&
    state.measure === asked.measure &&
    state.sinks === asked.sinks &&
    state.segments === asked.segments &&
    state.blockMean === asked.block_mean &&
    (asked.block_mean || state.layer === asked.layer) &&
    sameHeads;
  return same ? question.choices[question.answer.choice].token : null;
}
