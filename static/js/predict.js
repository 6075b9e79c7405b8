// "Predict first": before the attention views show a head, the learner guesses which token the
// selected one attends to most; the answer is the argmax of that query's exact softmax row.

import { queryNumbers } from "./data.js";
import { argmax, el, fixed, headsName } from "./format.js";
import { getState, setState, subscribe } from "./state.js";

const $ = (id) => document.getElementById(id);

// One question per run, block, head and query token; null when there is nothing to ask.
function questionKey({ predict, run, layer, head, heads, token }) {
  return predict && run && token !== null ? `${run.run_id}:${layer}:${head === "mean" ? heads.join("+") : head}:${token}` : null;
}

function where(layer, head, heads) {
  return head === "mean" ? `block ${layer}, ${headsName(getState().heads, heads)}` : `block ${layer}, head ${head}`;
}

// The query's weights over every key: one head's row, or for "mean" the mean of the chosen heads'
// rows (getState().heads), as the averaged heatmap shows them.
async function trueRow(layer, head, token) {
  if (head !== "mean") return (await queryNumbers(layer, head, token)).weights;
  const chosen = getState().heads;
  const rows = await Promise.all(chosen.map(async (h) => (await queryNumbers(layer, h, token)).weights));
  return rows[0].map((_, key) => rows.reduce((sum, row) => sum + row[key], 0) / chosen.length);
}

function quoted(tokens, index) {
  return `“${tokens[index].text}” (token ${index})`;
}

function renderQuestion(container, { run, layer, head, token }, heads, onAnswer) {
  // Under a causal mask a token cannot see later ones: those are not offered.
  const hidden = (index) => run.mask === "causal" && index > token;
  container.replaceChildren(
    el("h3", { id: "predict-title" }, `Which token will “${run.tokens[token].text}” attend to most in ${where(layer, head, heads)}?`),
    el("p", { class: "hint" }, "Guess first: pick a token. Then the heatmap, the lines and the worked example show the real weights."),
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
            ...(hidden(candidate.index) ? { disabled: "", title: "the causal mask hides later tokens" } : {}),
          },
          el("span", { class: "token-text" }, candidate.text),
          el("span", { class: "token-id" }, `#${candidate.index}`),
        ),
      ),
    ),
  );
  container.onclick = (event) => {
    const choice = event.target.closest(".predict-choice");
    if (choice) onAnswer(Number(choice.dataset.index));
  };
}

// A guess is right when its weight equals the largest: a tie counts for the learner.
function isRight(guess) {
  return guess.choiceWeight === guess.bestWeight;
}

function showOutcome(result, guess, tokens, query) {
  const right = isRight(guess);
  const who = `“${tokens[query].text}”`;
  result.dataset.outcome = right ? "right" : "wrong";
  result.replaceChildren(
    ...(right
      ? [el("strong", {}, "Right: "), `${who} attends most to ${quoted(tokens, guess.choice)}, weight ${fixed(guess.bestWeight)}.`]
      : [
          el("strong", {}, "Not this time: "),
          `${who} gives ${quoted(tokens, guess.choice)} ${fixed(guess.choiceWeight)} and attends most to ${quoted(tokens, guess.best)}, weight `,
          el("strong", { dataset: { field: "best-weight", index: String(guess.best) } }, fixed(guess.bestWeight)),
          ".",
        ]),
  );
}

function score(guesses) {
  const right = [...guesses.values()].filter(isRight).length;
  return `${right} of ${guesses.size} right`;
}

export function initPredict(model) {
  const toggle = $("predict");
  const result = $("predict-result");

  async function answer(choice) {
    const key = questionKey(getState());
    if (key === null || getState().guesses.has(key)) return;
    const { layer, head, token } = getState();
    try {
      const row = await trueRow(layer, head, token);
      const best = argmax(row);
      const { guesses } = getState();
      if (guesses.has(key)) return; // a second click while the numbers were on their way
      setState({ guesses: new Map(guesses).set(key, { choice, best, choiceWeight: row[choice], bestWeight: row[best] }) });
      // The chosen button is gone with the question; the verdict takes the keyboard's focus.
      if (questionKey(getState()) === key) result.focus({ preventScroll: true });
    } catch (error) {
      delete result.dataset.outcome;
      result.textContent = error.message;
    }
  }

  const show = (state) => {
    const key = questionKey(state);
    const guess = key === null ? null : state.guesses.get(key);
    const asking = key !== null && !guess;
    toggle.checked = state.predict;
    $("predict-score").hidden = !state.predict;
    $("predict-score").textContent = score(state.guesses);
    document.body.classList.toggle("predict-asking", asking);
    $("predict-question").hidden = !asking;
    $("dissection-cover").hidden = !asking;
    if (asking) renderQuestion($("predict-question"), state, model.heads, answer);
    delete result.dataset.outcome;
    if (guess) showOutcome(result, guess, state.run.tokens, state.token);
    else result.textContent = state.predict && state.token === null ? "Predict first: select a token to be asked where it looks." : "";
  };
  toggle.addEventListener("change", () => setState({ predict: toggle.checked }));
  subscribe((state, changed) => {
    if (["predict", "run", "layer", "head", "heads", "token", "guesses"].some((key) => changed.has(key))) show(state);
  });
  show(getState());
}
