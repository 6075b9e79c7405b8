// The Write panel: a decoder continues the prompt token by token, as transformers' model.generate does with the
// same knobs (api.write: POST /api/generate/stream). The written tokens grow on the stage as they come; each is a
// button that opens its step (written-step.js). An encoder's panel says that it reads and does not write, and how
// to serve a model that does.

import * as api from "./api.js";
import { el } from "./format.js";
import { overStage } from "./over-stage.js";
import { byId } from "./root.js";
import { quotedToken, stepView } from "./written-step.js";

function field(label, input) {
  return el("label", { class: "write-knob" }, label, " ", input);
}

function number(id, value, attributes) {
  return el("input", { type: "number", id, value: String(value), inputmode: "decimal", ...attributes });
}

// The knobs the form says, by transformers' names; sampling's knobs only when sampling.
function knobsOf(text) {
  const sample = byId("write-sample").checked;
  const knobs = { text, max_new_tokens: Number(byId("write-max").value), do_sample: sample };
  if (!sample) return knobs;
  return {
    ...knobs,
    temperature: Number(byId("write-temperature").value),
    top_k: Number(byId("write-top-k").value),
    top_p: Number(byId("write-top-p").value),
    seed: Number(byId("write-seed").value),
  };
}

// lab: {getState, model, readText(text, token): the lab's views on a text (the page runs it, a widget's kernel too)}
export function initWrite(lab) {
  const panel = byId("write");
  // What the panel shows, as the views say it (data-view, aria-busy): why it cannot write, the form, or a writing.
  const shows = (view, busy = false) => {
    panel.dataset.view = view;
    panel.setAttribute("aria-busy", String(busy));
  };
  if (lab.model.cannot_write) {
    panel.replaceChildren(el("p", { class: "hint unavailable", dataset: { field: "cannot-write" } }, `${lab.model.cannot_write}.`));
    shows("cannot-write");
    return;
  }
  const sample = el("input", { type: "checkbox", id: "write-sample" });
  const knobs = el(
    "fieldset",
    { class: "write-sampling", disabled: "" },
    el("legend", {}, "Sampling"),
    field("temperature", number("write-temperature", 1, { min: "0.05", step: "0.05" })),
    field("top-k (0: off)", number("write-top-k", 50, { min: "0", step: "1" })),
    field("top-p (1: off)", number("write-top-p", 1, { min: "0", max: "1", step: "0.05" })),
    field("seed", number("write-seed", 0, { min: "0", step: "1" })),
  );
  const go = el("button", { type: "submit", id: "write-go" }, "Write");
  const stop = el("button", { type: "button", id: "write-stop", hidden: "" }, "Stop");
  const form = el(
    "form",
    { class: "controls write-form", id: "write-form" },
    field("new tokens", number("write-max", 10, { min: "1", step: "1" })),
    el("label", { class: "check" }, sample, " sample (else the likeliest each time)"),
    knobs,
    go,
    stop,
  );
  const status = el("p", { id: "write-status", class: "hint", role: "status" }, "Write continues the prompt above, one token at a time. Each written token opens its step.");
  const prompt = el("div", { id: "write-prompt", class: "write-prompt", role: "group", "aria-label": "The prompt" });
  const written = el("div", { id: "write-tokens", class: "write-tokens", role: "group", "aria-label": "The tokens written" });
  const opened = el("div", { id: "write-step" });
  panel.replaceChildren(form, status, prompt, written, opened);
  shows("form");

  let writing = null; // the answer so far
  let chosen = null; // the step opened
  let calling = null; // the stream read now's AbortController
  let shown = null; // the id of the writing the panel shows, or is reading
  let followedNow = null; // the id of the writing the panel shows if it follows it (a class's teacher's, a link's)
  // A learner's screen that follows the teacher's writing shows its tokens in its first screen (over-stage.js).
  const lay = overStage(lab, "write");

  const open = (index) => {
    chosen = index;
    for (const chip of written.querySelectorAll(".written")) chip.setAttribute("aria-pressed", String(Number(chip.dataset.step) === index));
    opened.replaceChildren(stepView(writing, index));
  };
  const grow = (step) => {
    // The newest token in sight while the row is followed to its end (a long writing's row scrolls in itself).
    const following = written.scrollTop + written.clientHeight >= written.scrollHeight - 2;
    written.append(
      el(
        "button",
        { type: "button", class: "token written", "aria-pressed": "false", title: `token ${step.index + 1} written, id ${step.token}: open its step`, dataset: { step: String(step.index), id: String(step.token) } },
        el("span", { class: "token-text" }, quotedToken(step.text)),
        el("span", { class: "token-id" }, step.token),
      ),
    );
    if (following) written.scrollTop = written.scrollHeight;
  };
  // A step opened by a click starts just under the written tokens, which stay in sight above it (lab.css): the
  // panel's scroll box is moved, never the page.
  const showOpened = () => {
    const box = opened.closest(".panel-body");
    if (!box) return;
    const top = opened.getBoundingClientRect().top - box.getBoundingClientRect().top - box.clientTop + box.scrollTop;
    box.scrollTop = top - written.offsetHeight;
  };
  written.addEventListener("click", (event) => {
    const chip = event.target.closest(".written");
    if (!chip) return;
    open(Number(chip.dataset.step));
    showOpened();
  });
  // The whole sequence at a step, in the lab's own views: the prompt and the tokens written so far, as a text.
  opened.addEventListener("click", (event) => {
    const read = event.target.closest("[data-field=read-sequence]");
    if (!read) return;
    const step = writing.steps[Number(read.dataset.step)];
    lab.readText(writing.text + step.written, step.position);
  });
  sample.addEventListener("change", () => (knobs.disabled = !sample.checked));
  stop.addEventListener("click", () => calling?.abort());

  // A followed writing's knobs in the form, as generate used them: what the class sees written, and what Write
  // would write again.
  const showKnobs = (head) => {
    byId("write-max").value = String(head.max_new_tokens);
    sample.checked = head.settings.do_sample;
    knobs.disabled = !sample.checked;
    if (!sample.checked) return;
    byId("write-temperature").value = String(head.settings.temperature);
    byId("write-top-k").value = String(head.settings.top_k ?? 0);
    byId("write-top-p").value = String(head.settings.top_p);
    byId("write-seed").value = String(head.seed ?? 0);
  };

  // A writing's stream shown as it comes, the tokens growing on the stage: one this page asks for (api.write), or
  // one named by its id (api.followWriting: the writing a class's teacher shows, or a link's). Its id goes into
  // the state, so the link, and a class's view, name it.
  async function read(stream, followed = null) {
    calling?.abort();
    const mine = (calling = new AbortController());
    writing = null;
    chosen = null;
    shown = followedNow = followed;
    lay(followed);
    prompt.replaceChildren();
    written.replaceChildren();
    opened.replaceChildren();
    go.disabled = true;
    stop.hidden = followed !== null;
    shows("writing", true);
    status.textContent = followed ? "Following the writing…" : "Reading the prompt…";
    try {
      const done = await stream({
        signal: mine.signal,
        onEvent: (name, data, answer) => {
          writing = answer;
          if (name === "writing") {
            shown = data.writing_id;
            if (followed) showKnobs(data);
            lab.setState({ writing: data.writing_id });
            prompt.append(...data.prompt.map((token) => el("span", { class: "token prompt-token" }, el("span", { class: "token-text" }, quotedToken(token.text)))));
          } else if (name === "step") {
            grow(data);
            status.textContent = `Writing: ${answer.steps.length} of at most ${answer.max_new_tokens} tokens.`;
          }
        },
      });
      const why = done.stop === "eos" ? "the model wrote its end-of-text token" : `${done.max_new_tokens} new tokens were asked for`;
      status.textContent = `Written: ${done.steps.length} tokens; it stopped because ${why}. Open a written token to see how it was chosen.`;
      if (chosen === null && done.steps.length) open(0);
    } catch (error) {
      if (calling !== mine) return; // another writing took the panel: it says its own
      if (error.name === "AbortError") status.textContent = `Stopped after ${writing?.steps.length ?? 0} tokens: the lab calls the writing off at its next token.`;
      else status.textContent = error.message;
    } finally {
      if (calling === mine) {
        calling = null;
        go.disabled = false;
        stop.hidden = true;
        shows(writing?.writing_id ?? "form");
      }
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const asked = knobsOf(lab.getState().text);
    lab.setState({ writing: null }); // until the new writing's id comes: a class keeps the one before meanwhile
    read((options) => api.write(asked, options));
  });
  // A writing named by the state and not shown here (a class's teacher wrote it, a link names it) is followed
  // once the panel is open: its tokens grow here as they are written.
  const follow = () => {
    const { writing: named, panel: place } = lab.getState();
    if (named && named !== shown && place === "write") read((options) => api.followWriting(named, options), named);
  };
  lab.subscribe((state, changed) => {
    if (changed.has("panel")) lay(followedNow);
    if (changed.has("writing") || changed.has("panel")) follow();
  });
  follow();
}
