// A class question as every screen shows it, drawn from the server's QuestionState alone: {id, kind, test,
// text, step, view, measure, choices: [{index, label, token, head, document}], phase: "open" | "shown" |
// "closed" | "revealed", round, votes: [count per round], tallies: [{choice index: count} per closed round],
// answer: {choice, label, value} once revealed, correct: [share right per round] once revealed; a search
// question's values (cosines) and ranks (places in its whole index) once revealed, and ranked (how many
// documents its index ranks)}. Counts are public while a round is open; the histogram only once the round is
// closed; the answer only once revealed. A test ("pre" or "post") has one round, "closed" with nothing shown.

import { el, fixed } from "../format.js";
import { measureOf } from "../measures.js";

// Questions about a training the lab grows, asked before what they ask about happens and answered at the reveal
// from the training: never a test, and the stage stays uncovered while the class votes, to watch it grow.
export const ABOUT_TRAINING = ["grown_head", "loss_drop"];

// What the answer's number is: the measure it was asked under, as the page declares it (measures.js), a
// head's share of its pattern, the LM head's probability.
export function valueName(question) {
  if (question.kind === "head") return "share";
  if (["next_token", "written", "temperature"].includes(question.kind)) return "probability";
  if (question.kind === "patch") return "share of the way to B";
  if (question.kind === "search") return "cosine";
  if (question.kind === "grown_head") return "induction score";
  if (question.kind === "loss_drop") return "phase change at step";
  return measureOf(question.measure.key, question.view.sinks).name;
}

// The measure a question was asked under, said beside it (none for a question of another kind): it stays
// the question's when the view moves on.
export function askedUnder(question) {
  if (!question.measure) return [];
  const measure = measureOf(question.measure.key, question.view.sinks);
  return [el("p", { class: "hint", dataset: { field: "asked-under", measure: question.measure.key } }, `Asked under the ${measure.name} (${measure.symbol}, ${measure.values}).`)];
}

const NUMBERS = { 2: "two", 3: "three", 4: "four", 5: "five", 6: "six" }; // a search question's documents offered

// A temperature question's reveal: the token's probability at every temperature offered, not only the answer's.
function temperaturesLine(question) {
  if (question.kind !== "temperature" || !question.values) return "";
  return ` Its probability: ${question.choices.map((choice) => `${fixed(question.values[choice.index])} at ${choice.label}`).join(", ")}.`;
}

// A written question's reveal: the token the writing drew, which sampling may draw though another is likelier.
function drawnLine(question) {
  if (question.kind !== "written" || !question.values) return "";
  if (question.drawn === null) return " The writing drew none of these.";
  const { label } = question.choices[question.drawn];
  return ` The writing drew “${label}” (${fixed(question.values[question.drawn])}).`;
}

// A written question's words so far, as every screen shows them: the prompt and the tokens written before the
// step, then, once revealed, the token drawn (marked).
export function writtenSoFar(question) {
  if (question.words === null) return []; // a question about a writing's step has its words so far
  const drawn = question.phase === "revealed" && question.drawn !== null ? question.choices[question.drawn].label : null;
  return [
    el(
      "p",
      { class: "written-so-far", dataset: { field: "written-so-far" } },
      el("span", { class: "hint" }, "Written so far: "),
      question.words,
      drawn === null ? el("span", { class: "written-next", "aria-label": "the next token, not yet written" }, " …") : el("mark", { class: "written-next", dataset: { field: "written-drawn" } }, drawn),
    ),
  ];
}

// A cross-attention question's reveal: the target token's whole row over the source, not only its largest cell.
function rowLine(question) {
  if (question.kind !== "cross_attends" || !question.values) return "";
  return ` The row: ${question.choices.map((choice) => `“${choice.label}” ${fixed(question.values[choice.index])}`).join(", ")}.`;
}

export function answerLine(question) {
  const { label, value } = question.answer;
  // A step is a whole number: the one the training's measures mark as its phase change.
  if (question.kind === "loss_drop") return `The answer: “${label}”, the loss dropped at step ${value.toLocaleString("en")} (its phase change).`;
  const line = `The answer: “${label}”, ${valueName(question)} ${fixed(value)}.${drawnLine(question)}${temperaturesLine(question)}${rowLine(question)}`;
  if (question.kind !== "search" || !question.values) return line;
  // A search question's ranking of the documents offered, by cosine, best first; and where the exact search over
  // the whole index puts each (the first of these four may be far from the first of all).
  const ranked = question.choices.map((choice) => [choice.label, question.values[choice.index], question.ranks?.[choice.index]]).sort((a, b) => b[1] - a[1]);
  const these = NUMBERS[ranked.length] ?? String(ranked.length);
  const where = (rank) => (rank ? `, #${rank.toLocaleString("en")} of all ${question.ranked.toLocaleString("en")}` : "");
  return `${line} The ranking of these ${these}: ${ranked.map(([text, cosine, rank], place) => `${place + 1}. “${text}” (${fixed(cosine, 3)}${where(rank)})`).join("; ")}.`;
}

// The answer as the stage says it in one line: a search question's ranking of every document offered is the
// class panel's to give; the stage names the answer, its cosine and its place among all the index's documents.
export function stageLine(question) {
  if (question.kind !== "search") return answerLine(question);
  const { label, value, choice } = question.answer;
  const rank = question.ranks?.[choice];
  const where = rank ? `, #${rank.toLocaleString("en")} of all ${question.ranked.toLocaleString("en")}` : "";
  return `The answer: “${label}”, ${valueName(question)} ${fixed(value, 3)}${where}.`;
}

export function voteCount(question, round = question.round) {
  return question.votes[round - 1] ?? 0;
}

const percent = (share) => `${Math.round(100 * share)}% right`;

// In words, where the question stands.
export function phaseLine(question) {
  const votes = voteCount(question);
  const counted = `${votes} vote${votes === 1 ? "" : "s"}`;
  if (question.test && question.phase !== "revealed") {
    const test = question.test === "pre" ? "Pre-test" : "Post-test";
    return question.phase === "open" ? `${test}: answering alone, ${counted} so far.` : `${test} closed: ${counted}, shown to nobody.`;
  }
  if (question.phase === "open") return question.round === 1 ? `Round 1: voting, ${counted} so far.` : `Round 2: voting again, ${counted} so far.`;
  if (question.phase === "shown") return `Round ${question.round}: ${counted}, shown without the answer.`;
  return "Revealed.";
}

// One round's votes as bars, one per choice that got a vote (and the answer, once revealed), each labelled
// by its token and position (or head), in the choices' order; the answer's bar marked once revealed.
export function histogram(question, round) {
  const tally = question.tallies[round - 1] ?? {};
  const count = (choice) => tally[String(choice.index)] ?? 0;
  const largest = Math.max(1, ...question.choices.map(count));
  const answer = question.answer?.choice ?? null;
  const drawn = question.choices.filter((choice) => count(choice) > 0 || choice.index === answer);
  const total = question.choices.reduce((sum, choice) => sum + count(choice), 0);
  if (!drawn.length) return el("p", { class: "histogram-empty", dataset: { round: String(round), total: "0" } }, "No votes.");
  // A search question's choices are documents: each label a whole line of its own, wrapped, above its bar.
  const documents = question.choices.some((choice) => choice.document != null);
  return el(
    "div",
    { class: `histogram${documents ? " documents" : ""}`, role: "list", "aria-label": `Round ${round}'s votes`, dataset: { round: String(round), total: String(total) } },
    ...drawn.flatMap((choice) => {
      const mark = choice.index === answer ? " answer" : "";
      return [
        el("span", { class: `tally-label${mark}`, role: "listitem", dataset: { choice: String(choice.index), count: String(count(choice)) } }, choice.label),
        el("span", { class: `tally-bar${mark}`, style: `width:${(100 * count(choice)) / largest}%`, "aria-hidden": "true" }),
        el("span", { class: "tally-count" }, String(count(choice))),
      ];
    }),
  );
}

// Once revealed: the share right in round 1 and in round 2, side by side, each over its round's histogram.
export function rounds(question) {
  const [first, second = null] = question.correct ?? [];
  const column = (round, share) =>
    el(
      "div",
      { class: "round", dataset: { round: String(round), share: share === null ? "" : String(share) } },
      el("p", {}, `Round ${round}`),
      el("p", { class: "round-share" }, share === null ? "–" : `${Math.round(100 * share)}% right`),
      question.tallies[round - 1] ? histogram(question, round) : el("p", { class: "hint" }, "no second round"),
    );
  return el("div", { class: "rounds" }, column(1, first), column(2, second));
}

// Once revealed, what the discussion changed: each round's share right and the change in points, as the
// server counted them (question.correct).
export function changeLine(question) {
  const [first = null, second = null] = question.correct ?? [];
  const change = first === null || second === null ? null : Math.round(100 * (second - first));
  const text =
    first === null
      ? "Round 1: no votes."
      : change === null
        ? `Round 1: ${percent(first)}.`
        : `Round 1: ${percent(first)} → Round 2: ${percent(second)}, ${change < 0 ? "−" : "+"}${Math.abs(change)} points.`;
  return el("p", { class: "class-change", dataset: { field: "change", change: change === null ? "" : String(change) } }, text);
}

// What a pre-test and a post-test measured (the server's Gain: pre, post, gain, why; the class's with
// learners): each share right and Hake's normalised gain g = (post − pre) / (1 − pre), or why there is none.
export function gainLine(gain, whose) {
  const share = (value) => (value === null ? "no answer" : percent(value));
  const g = gain.gain === null ? `${gain.why}.` : `${whose === "class" ? "⟨g⟩" : "Your gain g"} = (post − pre) / (1 − pre) = ${gain.gain.toFixed(2)}.`;
  const who = whose === "class" ? `What the class learned (${gain.learners} learner${gain.learners === 1 ? "" : "s"} took both tests)` : "Your tests";
  return el(
    "p",
    { class: "class-gain-line", dataset: { field: "gain", pre: String(gain.pre), post: String(gain.post), gain: String(gain.gain) } },
    `${who}: pre-test ${share(gain.pre)} → post-test ${share(gain.post)}. ${g}`,
  );
}
