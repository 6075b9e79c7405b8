// The lesson plan in the teacher's panel: prepared as a list of steps (each the view on screen when it was
// added, an optional question and a note), saved as a JSON file or a link, opened again, and played: "Next
// step" applies the step's view, which the class follows, and asks its question when a class is live.

import * as api from "../api.js";
import { el } from "../format.js";
import { linkedPlan, PATCH_BY, PATTERNS, planLink, PLAN_FORMAT, QUESTION_KINDS, readPlan, stepOf, stepView, TESTS } from "./plan.js";
import { applyView } from "./shared.js";

const $ = (id) => document.getElementById(id);
const PLAN_KEY = "attention-lab-plan"; // sessionStorage: the plan this tab holds, and the step it is at
// The plans that come with the lab (static/lessons/), each a button of the editor: [id, file, label].
const READY = [
  ["plan-sample", "sample.json", "Sample lesson"],
  ["plan-vector", "ids-to-sentence-vector.json", "Ids to a sentence vector"],
  ["plan-search", "search.json", "Search with the sentence vector"],
  ["plan-grow", "grow.json", "Grow an induction head"],
  ["plan-write", "write.json", "A decoder writes"],
  ["plan-align", "alignment.json", "Alignment in translation"],
];
// The choices' words are short: a select cannot wrap, and the panel is 15 rem wide on a 1024×768 projector.
const KINDS = { attends: "Most attended token", cross_attends: "Most read source token", next_token: "Next token", search: "First document", grown_head: "Grown induction head", loss_drop: "When the loss drops", written: "Next written token", temperature: "Which temperature" };
const PATTERN_WORDS = {
  previous: "previous token",
  cls: "first special",
  sep: "last special",
  period: "the period",
  self: "itself",
  next: "next token",
};
const PATCH_WORDS = { head: "Head, by patching", position: "Token, by patching" };
const TEST_WORDS = { "": "in rounds", pre: "as a pre-test", post: "as a post-test" };
const TEST_MEANING = {
  "": "Peer instruction: vote, see the votes, talk, vote again, reveal",
  pre: "Alone, one round, before the lesson: nothing shown until the post-test",
  post: "Alone, one round, after the lesson: the same or a parallel question",
};

// Every question the plan format takes (plan.js), as the editor's choices: [value, label]. A next-token
// question only for a model with a language-model head, a question about a writing only for a model that writes,
// a cross-attention question only for an encoder-decoder.
function questionChoices(model) {
  const writes = (kind) => kind === "written" || kind === "temperature";
  const pair = (kind) => (kind === "cross_attends") === (model.kind === "encoder-decoder");
  return [
    ["", "no question"],
    ...QUESTION_KINDS.filter((kind) => (kind !== "next_token" || model.next_tokens) && (!writes(kind) || !model.cannot_write) && (writes(kind) || pair(kind))).flatMap((kind) => {
      if (kind === "head") return PATTERNS.map((pattern) => [`head:${pattern}`, `Head: ${PATTERN_WORDS[pattern]}`]);
      if (kind === "patch") return PATCH_BY.map((by) => [`patch:${by}`, PATCH_WORDS[by]]); // B: the ask row's B box
      return [[kind, KINDS[kind]]];
    }),
  ];
}

// A question about a writing asks about the Write panel's: its knobs, at the token opened there (the first if none;
// a temperature question of that step's second likeliest candidate).
function writingOnScreen() {
  const input = (id) => document.getElementById(id);
  if (!input("write-max")) return { writing: {}, index: 0 };
  const sample = input("write-sample").checked;
  const knobs = sample ? { temperature: Number(input("write-temperature").value), top_k: Number(input("write-top-k").value), top_p: Number(input("write-top-p").value), seed: Number(input("write-seed").value) } : {};
  const opened = document.querySelector("#write-tokens .written[aria-pressed=true]");
  return { writing: { max_new_tokens: Number(input("write-max").value), do_sample: sample, ...knobs }, index: opened ? Number(opened.dataset.step) : 0 };
}

// A patch question takes its input B from the teacher's panel (#class-source) when the step is added.
function questionOf(choice, test) {
  if (!choice) return null;
  const [kind, detail] = choice.split(":");
  const as = test ? { test } : {};
  if (kind === "written" || kind === "temperature") return { kind, ...writingOnScreen(), ...as };
  if (kind === "patch") return { kind, by: detail, source: $("class-source").value, ...as };
  return detail ? { kind, pattern: detail, ...as } : { kind, ...as };
}

function asks(question) {
  if (!question) return "";
  if (question.kind === "written" || question.kind === "temperature") return ` · asks at token ${question.index + 1}`;
  return question.test ? ` · ${question.test}-test` : " · asks";
}

const MOVE_WORDS = { start: " · starts growing", pause: " · pauses", resume: " · resumes" };

// The teacher panel's kind for a step's question (a patch question's kind says by what it patches).
function askedKind(question) {
  return question.kind === "patch" ? `patch-${question.by}` : question.kind;
}

// lab: the page; teacher.ask(kind, {pattern, step, text}) asks the class (nothing without a live class);
// teacher.open() opens the teacher's panel (a plan's link opens the page with it); teacher.taught() is the live
// class ({code, secret}) or null: while a class runs only its teacher moves a training.
export function initPlanner(lab, teacher) {
  const saved = JSON.parse(sessionStorage.getItem(PLAN_KEY) ?? "null");
  let plan = saved?.plan ?? { format: PLAN_FORMAT, title: "", model: lab.model.name, steps: [] };
  let at = saved?.at ?? -1; // the step being played; -1 before the first
  const section = $("class-plan");
  const keep = () => sessionStorage.setItem(PLAN_KEY, JSON.stringify({ plan, at }));

  const title = el("input", { id: "plan-title", placeholder: "Lesson title", maxlength: "120", "aria-label": "Lesson title" });
  title.addEventListener("change", () => {
    plan.title = title.value;
    keep();
  });
  const now = el("p", { id: "plan-now", class: "plan-now", "aria-live": "polite" });
  // The step's note, folded: the teacher's panel is on the projector too, and a note may say the answer.
  const noteText = el("p", {});
  const note = el("details", { id: "plan-note", class: "plan-note" }, el("summary", {}, "Note for you"), noteText);
  const back = el("button", { type: "button", id: "plan-back" }, "Back");
  const next = el("button", { type: "button", id: "plan-next", class: "primary" }, "Next step");
  const steps = el("ol", { id: "plan-steps", class: "plan-steps" });
  const stepTitle = el("input", { id: "plan-step-title", maxlength: "80", placeholder: "Step title" });
  const stepQuestion = el(
    "select",
    { id: "plan-step-question" },
    ...questionChoices(lab.model).map(([value, label]) => el("option", { value }, label)),
  );
  const stepTest = el("select", { id: "plan-step-test" }, ...["", ...TESTS].map((value) => el("option", { value, title: TEST_MEANING[value] }, TEST_WORDS[value])));
  // A patch question's B is typed in the ask row's B box: choosing one shows it.
  stepQuestion.addEventListener("change", () => {
    if (stepQuestion.value.startsWith("patch")) $("class-source-box").hidden = false;
  });
  const stepNote = el("textarea", { id: "plan-step-note", rows: "2", maxlength: "2000", placeholder: "A note for you (not shown to the class)" });
  const add = el("button", { type: "button", id: "plan-add" }, "Add this view as a step");
  const file = el("input", { type: "file", id: "plan-file", accept: "application/json,.json", class: "visually-hidden", tabindex: "-1" });
  const open = el("button", { type: "button", id: "plan-open" }, "Open…");
  const ready = READY.map(([id, file, label]) => {
    const button = el("button", { type: "button", id }, label);
    button.addEventListener("click", async () => {
      try {
        const response = await fetch(new URL(`../../lessons/${file}`, import.meta.url));
        load(readPlan(await response.json()), `“${label}”`);
      } catch (error) {
        failed(error);
      }
    });
    return button;
  });
  const save = el("button", { type: "button", id: "plan-save" }, "Save file");
  const link = el("button", { type: "button", id: "plan-link" }, "Copy link");
  const said = el("p", { id: "plan-said", class: "hint", "aria-live": "polite" });
  const editor = el(
    "details",
    { id: "plan-edit", class: "plan-edit" },
    el("summary", {}, "Edit the plan"),
    title,
    steps,
    el("fieldset", { class: "plan-new" }, el("legend", {}, "A new step: the view on screen"), stepTitle, el("label", {}, "Question ", stepQuestion), el("label", {}, "Asked ", stepTest), stepNote, add),
    el("div", { class: "class-actions" }, ...ready, open, save, link, file),
    said,
  );
  section.replaceChildren(el("h3", { id: "class-plan-title" }, "Lesson plan"), now, note, el("div", { class: "class-actions" }, back, next), editor);

  const show = () => {
    title.value = plan.title;
    const total = plan.steps.length;
    const step = plan.steps[at] ?? null;
    now.textContent = total === 0 ? "No steps yet: add views below, or open a plan." : step ? `Step ${at + 1} of ${total}: ${step.title}` : `${total} step${total === 1 ? "" : "s"}: “${plan.title || "Lesson"}”.`;
    now.dataset.step = String(at + 1);
    noteText.textContent = step?.note ?? "";
    note.hidden = !step?.note;
    note.open = false;
    back.disabled = at <= 0;
    next.disabled = at >= total - 1;
    next.textContent = at < 0 ? "Start" : "Next step";
    steps.replaceChildren(
      ...plan.steps.map((item, index) => {
        const go = el("button", { type: "button", class: "plan-go", "aria-current": index === at ? "step" : "false" }, `${index + 1}. ${item.title}${asks(item.question)}${MOVE_WORDS[item.training] ?? ""}`);
        go.addEventListener("click", () => play(index));
        const move = (label, name, action) => {
          const node = el("button", { type: "button", "aria-label": `${name} step ${index + 1}`, title: name }, label);
          node.addEventListener("click", () => {
            action();
            keep();
            show();
          });
          return node;
        };
        const swap = (other) => () => {
          [plan.steps[index], plan.steps[other]] = [plan.steps[other], plan.steps[index]];
          if (at === index || at === other) at = at === index ? other : index;
        };
        return el(
          "li",
          {},
          go,
          index > 0 ? move("↑", "Move up", swap(index - 1)) : null,
          index < total - 1 ? move("↓", "Move down", swap(index + 1)) : null,
          move("✕", "Remove", () => {
            plan.steps.splice(index, 1);
            if (at >= index) at -= 1;
          }),
        );
      }),
    );
  };

  // A step's move of the induction recipe: the Grow panel follows the training named in the state.
  async function train(move) {
    const taught = teacher.taught();
    const trainId = move === "start" ? null : (lab.getState().train ?? (await api.trainings()).active);
    if (move !== "start" && !trainId) throw new Error(`no training to ${move}: a step starts it first`);
    const status = move === "start" ? await api.startTraining({}, taught) : await api.moveTraining(trainId, move, taught);
    lab.setState({ train: status.train_id });
  }

  // A step played: its training moved, its view applied (the class follows both), then its question asked,
  // about that view's run.
  async function play(index) {
    const step = plan.steps[index];
    if (!step) return;
    at = index;
    keep();
    show();
    try {
      if (step.training) await train(step.training);
      if (!(await applyView(lab, stepView(step, lab.model)))) return; // another model's page opens instead
      if (step.question && lab.getState().run) {
        await teacher.ask(askedKind(step.question), { pattern: step.question.pattern, source: step.question.source, prefix: step.question.prefix ?? "", documentPrefix: step.question.document_prefix ?? "", documents: step.question.documents ?? null, writing: step.question.writing ?? {}, index: step.question.index ?? 0, rank: step.question.rank ?? 1, temperatures: step.question.temperatures ?? [0.2, 1.5], test: step.question.test ?? null, text: step.question.text ?? null, step: { index: index + 1, title: step.title } });
      }
    } catch (error) {
      lab.showError(`Step ${index + 1}: ${error.message}.`);
    }
  }

  const load = (loaded, from) => {
    plan = loaded;
    at = -1;
    keep();
    show();
    // A plan whose questions need a model that writes, opened on one that does not, says what to serve.
    const writes = plan.steps.some((step) => ["written", "temperature"].includes(step.question?.kind));
    const needs = writes && lab.model.cannot_write ? ` It needs ${plan.requires ?? "a model that writes"}. ${lab.model.cannot_write}.` : "";
    // A plan made for another model says how to get to it: its page, or serving it where this lab does not.
    const elsewhere =
      plan.model && plan.model !== lab.model.name
        ? ` It was made for ${plan.model}; this page reads ${lab.model.name}. Choose ${plan.model} in the model picker, or, where this lab does not serve it, download it beforehand (hf download ${plan.model}) and start the lab with ATTENTION_LAB_MODELS=${plan.model}.`
        : "";
    said.textContent = `Opened ${from}: ${plan.steps.length} steps.${elsewhere}${needs}`;
  };
  const failed = (error) => (said.textContent = `That plan could not be opened: ${error.message}.`);

  back.addEventListener("click", () => play(at - 1));
  next.addEventListener("click", () => play(at + 1));
  add.addEventListener("click", () => {
    plan.steps.push(stepOf(lab.getState(), { title: stepTitle.value, question: questionOf(stepQuestion.value, stepTest.value), note: stepNote.value }));
    plan.model = lab.model.name;
    stepTitle.value = "";
    stepNote.value = "";
    keep();
    show();
    said.textContent = `Step ${plan.steps.length} added.`;
  });
  stepQuestion.value = "";
  stepTest.value = "";
  open.addEventListener("click", () => file.click());
  file.addEventListener("change", async () => {
    const [chosen] = file.files;
    file.value = "";
    if (!chosen) return;
    try {
      load(readPlan(JSON.parse(await chosen.text())), chosen.name);
    } catch (error) {
      failed(error);
    }
  });
  save.addEventListener("click", () => {
    const name = `${(plan.title || "lesson").replace(/[^\w-]+/g, "-").slice(0, 60)}.json`;
    const href = URL.createObjectURL(new Blob([JSON.stringify(plan, null, 2)], { type: "application/json" }));
    const anchor = el("a", { href, download: name });
    document.body.append(anchor);
    anchor.click();
    anchor.remove();
    setTimeout(() => URL.revokeObjectURL(href), 1000);
  });
  link.addEventListener("click", async () => {
    const url = await planLink(plan, lab.defaultModel);
    link.dataset.url = url;
    try {
      await navigator.clipboard.writeText(url);
      said.textContent = "Link to this plan copied.";
    } catch {
      said.textContent = `The plan's link: ${url}`;
    }
  });
  linkedPlan().then((linked) => {
    if (!linked) return;
    load(linked, "from the link");
    teacher.open();
  }, failed);
  show();
  // The step being played, with the class's answers: the CSV names it.
  return { step: () => (plan.steps[at] ? { index: at + 1, title: plan.steps[at].title } : null) };
}
