// A learner's side of a class (the page opened from the join link, ?class=CODE): it follows the teacher's
// view until the learner explores alone, and votes on the class's questions. Whether its views show numbers
// is the server's question phase (blind.js), following or not. On a phone that follows, the prompt, the
// tokens and the controls fold away ("Controls"), so the views the teacher moves come first.

import { el } from "../format.js";
import { joinClass, score, updateLearner, vote } from "./calls.js";
import { listen } from "./live.js";
import { answerLine, askedUnder, phaseLine } from "./question.js";
import { applyView } from "./shared.js";

const $ = (id) => document.getElementById(id);
const NICKNAME_KEY = "attention-lab-nickname";

export async function initLearner(lab, code) {
  $("class-bar").hidden = false;
  $("class-start").hidden = true;
  const status = $("class-status");
  const follow = $("class-follow");
  const nickname = $("class-nickname");
  nickname.value = localStorage.getItem(NICKNAME_KEY) ?? "";
  let learner;
  try {
    ({ learner } = await joinClass(code, nickname.value));
  } catch (error) {
    status.textContent = `Could not join class ${code}: ${error.message}.`;
    return;
  }
  // This browser's votes, per question and round: they survive a reload of the page.
  const VOTES_KEY = `attention-lab-votes-${code}`;
  const votes = JSON.parse(sessionStorage.getItem(VOTES_KEY) ?? "{}");
  let following = true;
  let latest = null;
  let question = null;
  const said = () => (following ? `Class ${code}: your screen follows the teacher.` : `Class ${code}: you explore on your own.`);
  const update = () => updateLearner(code, learner, following, nickname.value).catch(() => {});
  const showFollowing = () => {
    follow.setAttribute("aria-pressed", String(following));
    follow.textContent = following ? "Following the teacher" : "Exploring alone · follow again";
    document.body.classList.toggle("following", following);
    status.textContent = said();
  };
  nickname.addEventListener("change", () => {
    localStorage.setItem(NICKNAME_KEY, nickname.value);
    update();
  });
  follow.addEventListener("click", () => {
    following = !following;
    showFollowing();
    update();
    if (following && latest) applyView(lab, latest);
  });
  const controls = $("class-controls");
  controls.addEventListener("click", () => {
    const open = document.body.classList.toggle("controls-open");
    controls.setAttribute("aria-expanded", String(open));
  });
  showFollowing();

  const choose = async (choice) => {
    try {
      await vote(code, learner, question.id, question.round, choice);
      votes[question.id] = { ...votes[question.id], [question.round]: choice };
      sessionStorage.setItem(VOTES_KEY, JSON.stringify(votes));
    } catch (error) {
      $("class-question").dataset.error = error.message;
    }
    ask();
  };
  // The score once per revealed question (a learner's actions are counted by the server: no more than needed).
  const scores = new Map();
  const scoreAfter = (id) => {
    if (!scores.has(id)) {
      scores.set(id, score(code, learner).catch(() => scores.delete(id) && null)); // asked again next time
    }
    return scores.get(id);
  };
  // The question box: the choices while a round is open, the learner's own votes, the answer once revealed.
  const ask = async () => {
    const box = $("class-question");
    box.hidden = !question;
    if (!question) return box.replaceChildren();
    const mine = votes[question.id] ?? {};
    const label = (choice) => question.choices.find((candidate) => candidate.index === choice)?.label;
    const parts = [el("p", { class: "caption", dataset: { field: "question" } }, question.text), ...askedUnder(question)];
    if (question.phase === "open") {
      const current = mine[question.round] ?? null;
      parts.push(
        el("p", { class: "hint" }, `Round ${question.round}: vote.`),
        el(
          "div",
          { class: "choices", role: "group", "aria-label": "Your vote" },
          ...question.choices.map((choice) => {
            const button = el("button", { type: "button", "aria-pressed": String(choice.index === current), dataset: { index: String(choice.index) } }, choice.label);
            button.addEventListener("click", () => choose(choice.index));
            return button;
          }),
        ),
        el(
          "p",
          { dataset: { field: "mine" } },
          current !== null
            ? `Your vote: “${label(current)}”. You may change it until the round closes.`
            : question.round === 2 && mine[1] !== undefined
              ? `Round 2: vote again. In round 1 you chose “${label(mine[1])}”; keep it or change it.`
              : "Pick one: your vote is counted without your name.",
        ),
      );
    } else if (question.phase === "shown") {
      const current = mine[question.round];
      parts.push(el("p", { dataset: { field: "mine" } }, `${phaseLine(question)} ${current === undefined ? "You did not vote." : `You voted “${label(current)}”.`} Discuss it with a neighbour.`));
    } else {
      const right = (round) => (mine[round] === undefined ? "no vote" : `“${label(mine[round])}”, ${question.answer.right.includes(mine[round]) ? "right" : "not this time"}`);
      const line = el("p", { dataset: { field: "reveal", answer: String(question.answer.choice) } }, `${answerLine(question)} Round 1: ${right(1)}.${question.votes.length > 1 ? ` Round 2: ${right(2)}.` : ""}`);
      parts.push(line);
      const shownFor = question.id;
      box.replaceChildren(...parts);
      const mark = await scoreAfter(shownFor);
      if (question?.id !== shownFor || mark === null) return;
      parts.push(el("p", { dataset: { field: "score", right: String(mark.right), asked: String(mark.asked) } }, `Your score: ${mark.right} of ${mark.asked}.`));
    }
    box.replaceChildren(...parts);
  };

  listen(lab, code, "learner", {
    connection: (open) => (status.textContent = open ? said() : `Class ${code}: reconnecting…`),
    view: (view) => {
      latest = view;
      if (following) applyView(lab, view);
    },
    question: (next) => {
      question = next;
      ask();
    },
    votes: (next) => {
      question = next; // counts only, shown on the stage: the box (and a choice being tapped) stays
    },
    ended: () => {
      status.textContent = `Class ${code} has ended: the lab is yours to explore.`;
      following = false;
      document.body.classList.remove("following");
      follow.hidden = true;
    },
  });
}
