// A learner's side of a class (the page opened from the join link, ?class=CODE): it follows the teacher's
// view until the learner explores alone, and votes on the class's questions. Whether its views show numbers
// is the server's question phase (blind.js), following or not. On a phone that follows, the prompt, the
// tokens and the controls fold away ("Controls"), so the views the teacher moves come first. The learner's
// name for the teacher's list is asked up front (optional: one tap skips it) and changed from the bar; an
// anonymous class asks none, and the name this browser keeps is never sent to it.

import { el } from "../format.js";
import { classSnapshot, joinClass, score, updateLearner, vote } from "./calls.js";
import { listen } from "./live.js";
import { answerLine, askedUnder, gainLine, phaseLine, writtenSoFar } from "./question.js";
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
  let rejoined;
  let anonymous;
  let sent; // the name the teacher's list has, as this page last sent it
  try {
    ({ anonymous } = await classSnapshot(code)); // before joining: an anonymous class is sent no name
    sent = anonymous ? "" : nickname.value;
    ({ learner, rejoined } = await joinClass(code, sent));
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
  const update = () => {
    sent = anonymous ? "" : nickname.value;
    return updateLearner(code, learner, following, sent).catch(() => {});
  };
  const showFollowing = () => {
    follow.setAttribute("aria-pressed", String(following));
    follow.textContent = following ? "Following the teacher" : "Exploring alone · follow again";
    document.body.classList.toggle("following", following);
    status.textContent = said();
  };
  // The name: asked once as the learner joins (not again on a reload), then behind the bar's name button.
  const naming = $("class-name");
  const rename = $("class-name-edit");
  const showName = (open) => {
    naming.hidden = !open;
    rename.hidden = open;
    rename.setAttribute("aria-expanded", String(open));
    rename.textContent = nickname.value.trim() ? `Name: ${nickname.value.trim()}` : "Add your name";
    if (open) nickname.focus({ preventScroll: true });
  };
  naming.addEventListener("submit", (event) => {
    event.preventDefault();
    localStorage.setItem(NICKNAME_KEY, nickname.value);
    update();
    showName(false);
    ask(); // the question box says under which name the teacher's file lists the vote
  });
  $("class-name-skip").addEventListener("click", () => showName(false));
  rename.addEventListener("click", () => showName(true));
  $("class-anonymous").hidden = !anonymous;
  if (anonymous) {
    naming.hidden = rename.hidden = true;
  } else {
    showName(!rejoined);
  }
  // Who sees a vote, as it is: the class only the tally; the teacher's answers file the name, or a number.
  const whoSees = () => {
    if (anonymous) return "Your answers are anonymous: the class sees only the tally, and the teacher's file numbers learners without names.";
    const name = sent.trim();
    return `The class sees only the tally; the teacher's file lists your vote ${name ? `under your name “${name}”` : "under a number (you gave no name)"}.`;
  };
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
    const parts = [el("p", { class: "caption", dataset: { field: "question" } }, question.text), ...askedUnder(question), ...writtenSoFar(question)];
    if (question.phase === "open") {
      const current = mine[question.round] ?? null;
      parts.push(
        el("p", { class: "hint" }, question.test ? `A ${question.test}-test: answer alone, without talking. No screen shows the votes.` : `Round ${question.round}: vote.`),
        el(
          "div",
          { class: "choices", role: "group", "aria-label": "Your vote" },
          ...question.choices.map((choice) => {
            const document = choice.document ?? null; // a search question's choices are documents: they wrap, whole
            const button = el("button", { type: "button", "aria-pressed": String(choice.index === current), dataset: { index: String(choice.index), ...(document === null ? {} : { document: String(document) }) } }, choice.label);
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
              : "Pick one.",
        ),
        el("p", { class: "hint", dataset: { field: "who-sees" } }, whoSees()),
      );
    } else if (question.phase === "shown") {
      const current = mine[question.round];
      parts.push(el("p", { dataset: { field: "mine" } }, `${phaseLine(question)} ${current === undefined ? "You did not vote." : `You voted “${label(current)}”.`} Discuss it with a neighbour.`));
    } else if (question.phase === "closed") {
      const current = mine[1];
      const later = question.test === "pre" ? "The post-test asks again at the end." : "Its answer comes at the reveal.";
      parts.push(el("p", { dataset: { field: "mine" } }, `${phaseLine(question)} ${current === undefined ? "You did not answer." : `You answered “${label(current)}”.`} ${later}`));
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

  // The learner's own pre-test, post-test and gain, once the class's are measured (asked once per measure).
  const learned = $("class-learned");
  let measured = null;
  const showGain = async (gain) => {
    const key = gain && JSON.stringify(gain);
    if (key === measured) return;
    measured = key;
    const mark = gain ? await score(code, learner).catch(() => null) : null;
    learned.hidden = !mark?.gain;
    learned.replaceChildren(...(mark?.gain ? [gainLine(mark.gain, "learner")] : []));
  };

  listen(lab, code, "learner", {
    connection: (open) => (status.textContent = open ? said() : `Class ${code}: reconnecting…`),
    gain: showGain,
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
