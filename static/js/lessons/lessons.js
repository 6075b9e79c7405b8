// The experiments panel: one tab per lesson, each drawn when opened and again when the run or the
// selected token changes while it is open.

import { blankNote } from "../blind.js";
import { missing, unavailableNote } from "../capabilities.js";
import { runPrompt } from "../controls.js";
import { el } from "../format.js";
import { backToStage } from "../panels.js";
import { renderAblation } from "./ablation.js";
import { renderCompare } from "./compare.js";
import { moveDifference, renderDifference } from "./difference.js";
import { renderExplain } from "./explain.js";
import { renderHeads } from "./heads.js";
import { renderMasks } from "./masks.js";
import { renderNearest } from "./nearest.js";
import { renderPatch } from "./patch.js";
import { renderPooling } from "./pooling.js";
import { renderScoreboard } from "./scoreboard.js";
import { renderSearch } from "./search.js";

// needs: what a lesson reads beyond the attention weights (capabilities.js): a token's rows at each stage
// (compare, masks, nearest), switched-off heads, or the measures.
export const LESSONS = {
  compare: { title: "Same id, different meaning", render: renderCompare, follows: ["run"], needs: "pipeline" },
  masks: { title: "Bidirectional vs causal", render: renderMasks, follows: ["run", "token"], needs: "pipeline" },
  ablation: { title: "Switch heads off", render: renderAblation, follows: ["run", "token"], needs: "ablation" },
  patch: { title: "Patch", render: renderPatch, follows: ["run", "token"], needs: "ablation" },
  heads: { title: "What each head does", render: renderHeads, follows: ["run", "token"] },
  nearest: { title: "Nearest vocabulary rows", render: renderNearest, follows: ["run", "token"], needs: "pipeline" },
  pooling: { title: "Pooling and prefixes", render: renderPooling, follows: ["run"] },
  difference: { title: "Difference A − B", render: renderDifference, follows: ["run"], move: moveDifference },
  explain: { title: "Is attention explanation?", render: renderExplain, follows: ["run", "token", "layer", "head"], needs: "measures" },
  scoreboard: { title: "Do the accounts agree?", render: renderScoreboard, follows: ["run", "token"], needs: "measures" },
  search: { title: "Search", render: renderSearch, follows: ["run"] },
};

// The reason a lesson is not offered for this model, or null.
function lessonMissing(model, name) {
  return LESSONS[name].needs ? missing(model, LESSONS[name].needs) : null;
}

export function renderTabs(container, current, onOpen, model) {
  const tabs = Object.entries(LESSONS).map(([name, lesson]) =>
    el(
      "button",
      {
        type: "button",
        role: "tab",
        id: `lesson-tab-${name}`,
        "aria-selected": String(name === current),
        "aria-controls": "lesson-panel",
        dataset: { lesson: name },
        ...(lessonMissing(model, name) ? { class: "unavailable", title: `Not available for this model: ${lessonMissing(model, name)}` } : {}),
      },
      lesson.title,
    ),
  );
  container.replaceChildren(...tabs);
  container.onclick = (event) => {
    const tab = event.target.closest("[role=tab]");
    if (tab) onOpen(tab.dataset.lesson);
  };
  container.onkeydown = (event) => {
    if (event.key !== "ArrowRight" && event.key !== "ArrowLeft") return;
    const names = Object.keys(LESSONS);
    const next = names[(names.indexOf(current) + (event.key === "ArrowRight" ? 1 : names.length - 1)) % names.length];
    onOpen(next);
    document.getElementById(`lesson-tab-${next}`)?.focus();
  };
}

// context: {run, text, token, current (the state now), model, onOpen}
export async function renderLesson(panel, name, context) {
  panel.setAttribute("aria-labelledby", `lesson-tab-${name}`);
  if (lessonMissing(context.model, name)) {
    panel.replaceChildren(unavailableNote(context.model, LESSONS[name].needs));
    panel.dataset.view = `${name}:${context.run.run_id}:${context.token}`;
    return;
  }
  try {
    await LESSONS[name].render(panel, context);
  } catch (error) {
    panel.replaceChildren(el("p", { class: "error" }, error.message));
  }
  panel.dataset.view = `${name}:${context.run.run_id}:${context.token}`;
}

// A lesson's `move`, where it has one, keeps what it shows in step with the view chosen above without
// drawing the lesson again (what was typed in it stays).
const VIEW_KEYS = ["layer", "head", "heads", "blockMean", "sinks", "segments", "measure"];

// The experiments panel: its tabs, and the open lesson drawn again when what that lesson follows changes.
export const lessonsView = {
  id: "lessons",
  follows: (state) => ["run", "lesson", ...(state.lesson ? LESSONS[state.lesson].follows : [])],
  moves: VIEW_KEYS,
  move(state, lab) {
    const lesson = state.lesson ? LESSONS[state.lesson] : null;
    if (lesson?.move && state.panel === "lessons") lesson.move(document.getElementById("lesson-panel"), { current: lab.getState, model: lab.model });
  },
  shown: (state) => state.panel === "lessons",
  blank: blankNote("lesson-panel"),
  render(state, _, lab) {
    renderTabs(document.getElementById("lesson-tabs"), state.lesson, (lesson) => lab.setState({ lesson }), lab.model);
    if (!state.lesson) return;
    renderLesson(document.getElementById("lesson-panel"), state.lesson, {
      run: state.run,
      text: state.text,
      token: state.token,
      current: lab.getState,
      model: lab.model,
      // Each opens something on the stage: an enlarged panel lies back so that it is in sight.
      onOpen: (layer, head) => {
        backToStage();
        lab.setState({ layer, head });
      },
      useText: (text) => {
        backToStage();
        lab.setState({ text, patch: null, pair: "" });
        runPrompt(lab);
      },
      openPair: (text, pair) => {
        // A search result read as one input: the query as A, the document as B, A → B on the heatmap.
        backToStage();
        lab.setState({ text, pair, patch: null, segments: "AB", promptName: "" });
        runPrompt(lab);
      },
      openPatched: (text, patch) => {
        // What /api/patch reads: the text alone, with the model's own mask, pooling and no prompt.
        backToStage();
        lab.setState({ text, patch, pair: "", mask: lab.model.default_mask, pooling: lab.model.default_pooling, promptName: "" });
        runPrompt(lab);
      },
    });
  },
};
