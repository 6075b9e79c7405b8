// "Predict first": before the attention views show a head, the learner guesses which token the
// selected one attends to most; the answer is the largest value of that query's row in the matrix the
// heatmap then reveals (matrix.js: the same measure, head, head set, block mean and filters). A question
// belongs to the view it was asked in: switching the measure (or any of the view) asks anew, and a
// question on screen is answered in its own view, which it names.

import { el, fixed } from "./format.js";
import { viewLayers, viewName } from "./matrix.js";
import { measureOf } from "./measures.js";
import { chipText } from "./tokens.js";

const $ = (id) => document.getElementById(id);

// One question per run, view (its measure included) and query token; null when there is nothing to ask.
function questionKey({ predict, run, measure, layer, head, heads, blockMean, sinks, segments, token }) {
  if (!predict || !run || token === null) return null;
  const which = measureOf(measure).per_block ? "block" : head === "mean" ? heads.join("+") : head;
  return [run.run_id, measure, blockMean ? "all" : layer, which, sinks, segments, token].join(":");
}

// The query's row as the heatmap shows it: NaN where the view leaves a key out (a long run's fetched alone).
async function trueRow(state, lab) {
  return (await lab.numbers().row(state, state.run.tokens, lab.model.layers, state.token)).row;
}

// The largest value of a row, over the keys the view keeps.
function strongest(row) {
  let best = null;
  row.forEach((weight, key) => {
    if (!Number.isNaN(weight) && (best === null || weight > row[best])) best = key;
  });
  return best;
}

function quoted(tokens, index) {
  return `“${tokens[index].label}” (token ${index})`;
}

function renderQuestion(container, state, row, model, onAnswer) {
  const { run, token } = state;
  // Under a causal mask a token cannot see later ones, nor, where every block the view draws slides, the
  // ones its widest window has passed (on either side under the bidirectional mask); a filter may leave keys
  // out too: those are not offered.
  const windows = viewLayers(state, model).map((layer) => model.windows[layer]);
  const reach = windows.includes(null) ? Infinity : Math.max(...windows);
  const distance = (index) => (run.mask === "causal" ? token - index : Math.abs(token - index));
  const hidden = (index) => (run.mask === "causal" && index > token) || distance(index) >= reach || Number.isNaN(row[index]);
  const measure = measureOf(state.measure, state.sinks);
  container.dataset.measure = state.measure;
  container.replaceChildren(
    el("h3", { id: "predict-title" }, `Which token will “${run.tokens[token].label}” attend to most in ${viewName(state, model)}?`),
    el(
      "p",
      { class: "hint", dataset: { field: "asked-under" } },
      `Asked under the ${measure.name} (${measure.symbol}, ${measure.values}). Guess first: pick a token. Then the heatmap, the lines and the worked example show the real values.`,
    ),
    el(
      "div",
      { class: "predict-choices" },
      ...run.tokens.map((candidate) =>
        el(
          "button",
          {
            type: "button",
            class: `token predict-choice${candidate.special ? " special" : ""}`,
            title: `token ${candidate.index}`,
            dataset: { index: String(candidate.index) },
            ...(hidden(candidate.index) ? { disabled: "", title: "this view leaves this token out (the causal mask or its window, or a filter)" } : {}),
          },
          chipText(candidate),
          el("span", { class: "token-id" }, `#${candidate.index}`),
        ),
      ),
    ),
  );
  container.onclick = (event) => {
    const choice = event.target.closest(".predict-choice");
    if (choice) onAnswer(state, Number(choice.dataset.index));
  };
}

// A guess is right when its weight equals the largest: a tie counts for the learner.
function isRight(guess) {
  return guess.choiceWeight === guess.bestWeight;
}

function showOutcome(result, guess, tokens, query) {
  const right = isRight(guess);
  const who = `“${tokens[query].label}”`;
  const { name } = measureOf(guess.measure, guess.sinks);
  result.dataset.outcome = right ? "right" : "wrong";
  result.dataset.measure = guess.measure;
  result.replaceChildren(
    ...(right
      ? [el("strong", {}, "Right: "), `${who} attends most to ${quoted(tokens, guess.choice)}, ${name} `]
      : [
          el("strong", {}, "Not this time: "),
          `${who} gives ${quoted(tokens, guess.choice)} ${fixed(guess.choiceWeight)} and attends most to ${quoted(tokens, guess.best)}, ${name} `,
        ]),
    el("strong", { dataset: { field: "best-weight", index: String(guess.best) } }, fixed(guess.bestWeight)),
    ".",
  );
}

function score(guesses) {
  const right = [...guesses.values()].filter(isRight).length;
  return `${right} of ${guesses.size} right`;
}

// lab: {getState, setState, subscribe, model, numbers}
export function initPredict(lab) {
  const { getState, setState, subscribe, model } = lab;
  const toggle = $("predict");
  const result = $("predict-result");

  // asked: the state the question was asked in; its view (measure, head, filters) decides the answer,
  // whatever the page shows by the time the choice is made.
  async function answer(asked, choice) {
    const key = questionKey(asked);
    if (key === null || getState().guesses.has(key)) return;
    try {
      const row = await trueRow(asked, lab);
      const best = strongest(row);
      const { guesses } = getState();
      if (guesses.has(key)) return; // a second click while the numbers were on their way
      setState({ guesses: new Map(guesses).set(key, { measure: asked.measure, sinks: asked.sinks, choice, best, choiceWeight: row[choice], bestWeight: row[best] }) });
      // The chosen button is gone with the question; the verdict takes the keyboard's focus.
      if (questionKey(getState()) === key) result.focus({ preventScroll: true });
    } catch (error) {
      delete result.dataset.outcome;
      result.textContent = error.message;
    }
  }

  let asked = 0; // the newest question: an older one's row arriving late is not drawn
  const show = async (state) => {
    const key = questionKey(state);
    const guess = key === null ? null : state.guesses.get(key);
    const asking = key !== null && !guess;
    toggle.checked = state.predict;
    $("predict-score").hidden = !state.predict;
    $("predict-score").textContent = score(state.guesses);
    document.body.classList.toggle("predict-asking", asking);
    $("predict-question").hidden = !asking;
    $("dissection-cover").hidden = !asking;
    const mine = ++asked;
    if (asking) {
      const row = await trueRow(state, lab);
      if (mine === asked) renderQuestion($("predict-question"), state, row, model, answer);
    }
    delete result.dataset.outcome;
    if (guess) showOutcome(result, guess, state.run.tokens, state.token);
    else result.textContent = state.predict && state.token === null ? "Predict first: select a token to be asked where it looks." : "";
  };
  toggle.addEventListener("change", () => setState({ predict: toggle.checked }));
  const follows = ["predict", "run", "measure", "layer", "head", "heads", "blockMean", "sinks", "segments", "token", "guesses"];
  subscribe((state, changed) => {
    if (follows.some((key) => changed.has(key))) show(state).catch((error) => lab.showError(error.message));
  });
}
