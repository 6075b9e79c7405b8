// The stage during a class question, on every screen of the class (the projector is the teacher's own
// page): while a round is open, the question and its count of votes over the views, which are drawn blank
// (views.js, blind.js); once the round's votes are shown, its histogram in their place, large; once
// revealed, nothing over the views, which show everything again with the answer marked (or on the
// projector, where no view marks it, said above the heatmap in its own measure). A pre-test or a
// post-test is answered alone, and closed with nothing of it shown: a pre-test's views come back (the lesson
// goes on), a post-test's stay covered until its reveal.

import { revealedKey } from "../blind.js";
import { el } from "../format.js";
import { ABOUT_TRAINING, stageLine, askedUnder, gainLine, histogram, phaseLine, writtenSoFar } from "./question.js";

const $ = (id) => document.getElementById(id);
let gain = null; // what the class's pre-test and post-test measured, once both are closed (the server's ClassGain)
let shown = [null, null]; // the question and role the stage shows, to draw it again when the gain comes

// The class's gain, said on the projector's stage as a closed post-test waits for its reveal: the room sees
// what it learned, large, before the answer.
export function showStageGain(next) {
  gain = next;
  showStage(...shown);
}

// question: the server's QuestionState, or null. role: "teacher" or "learner", for the line that says what
// to do now.
export function showStage(question, role) {
  shown = [question, role];
  const cover = $("class-stage");
  // A question about a model still to grow leaves the stage uncovered: the class watches it grow, and the grow
  // panel hides its heads until a grown_head question's reveal (grow.js).
  const covered =
    Boolean(question) && !ABOUT_TRAINING.includes(question.kind) && question.phase !== "revealed" && !(question.phase === "closed" && question.test === "pre");
  cover.hidden = !covered;
  document.body.classList.toggle("blind", covered);
  if (!covered) {
    cover.replaceChildren();
    delete cover.dataset.phase;
    return;
  }
  cover.dataset.phase = question.phase;
  cover.dataset.round = String(question.round);
  const todo = question.test
    ? question.phase === "closed"
      ? "Its answer comes at the reveal."
      : `${role === "teacher" ? "Everyone answers" : "Answer above"} alone, without talking: this ${question.test}-test measures what the class knows. No votes are shown.`
    : question.phase === "open"
      ? role === "teacher"
        ? "Everyone votes on their own screen. The numbers stay hidden until the reveal."
        : "Vote above. The numbers stay hidden until the reveal."
      : question.round === 1
        ? "Discuss with a neighbour: who is right, and why?"
        : "The second round's votes.";
  // A learner reads the question in the class bar above, beside its choices; the projector shows it here.
  cover.replaceChildren(
    ...(role === "teacher" ? [el("h2", { id: "class-stage-question" }, question.text), ...askedUnder(question), ...writtenSoFar(question)] : []),
    el("p", { class: "class-stage-phase", dataset: { field: "phase" } }, phaseLine(question)),
    ...(role === "teacher" && gain && question.test === "post" && question.phase === "closed" ? [gainLine(gain, "class")] : []),
    ...(question.phase === "shown" ? [histogram(question, question.round)] : []),
    el("p", { class: "hint" }, todo),
  );
}

// Once revealed, the projector states the answer in the question's own measure, above the heatmap, unless a
// view marks it where it was asked (an attends question's row and cell, revealedKey): the views draw
// attention, which is not what a patch, head or next-token question measured. A search question's answer is a
// document, said with its ranking in the panel. (A learner reads the answer in the class bar.)
export function showVerdict(state) {
  const { question } = state;
  const verdict = $("class-verdict");
  const said = question?.phase === "revealed" && revealedKey(state) === null;
  verdict.hidden = !said;
  verdict.textContent = said ? stageLine(question) : "";
}
