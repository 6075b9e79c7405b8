// The token strip: one chip per subword piece, its id below; click or arrow keys select a token.

import { el } from "./format.js";
import { byId } from "./root.js";

// A token's name as a chip shows it: its label (the server's, app/engine/labels.py, the one every view uses),
// the position that tells a repeated word apart ("a #4") set off as a mark; the span's text is the label.
export function chipText(token) {
  const mark = ` #${token.index}`;
  if (!token.label.endsWith(mark)) return el("span", { class: "token-text" }, token.label);
  return el("span", { class: "token-text" }, token.label.slice(0, -mark.length), el("span", { class: "token-mark" }, mark));
}

// A sentence pair's chips are marked by segment, with a divider where segment B begins; the chips read from
// the model's prompt (put before the text) are marked as prompt tokens.
// on.select(index, add): a click (add: with Shift, to join the selection); on.preview(index or null):
// a mouse resting on a chip, or leaving the strip. A touch previews nothing: a tap selects, and nothing
// would ever end a preview on a phone.
export function renderTokens(container, tokens, selected, on) {
  const chips = tokens.map((token) =>
      el(
        "button",
        {
          type: "button",
          class: `token${token.special ? " special" : ""}${token.text.startsWith("##") ? " continuation" : ""}${token.segment === "B" ? " segment-b" : ""}${token.prompt ? " prompt" : ""}`,
          role: "option",
          "aria-selected": String(token.index === selected),
          tabindex: "-1",
          title: `token ${token.index} · id ${token.id} · segment ${token.segment}${token.special ? " · special token" : ""}${token.prompt ? " · from the model's prompt" : ""}`,
          dataset: { index: String(token.index), id: String(token.id), special: String(token.special), segment: token.segment, prompt: String(Boolean(token.prompt)) },
        },
        chipText(token),
        el("span", { class: "token-id" }, token.id),
      ),
  );
  const boundary = tokens.findIndex((token) => token.segment === "B");
  if (boundary > 0) chips.splice(boundary, 0, el("span", { class: "segment-boundary", "aria-label": "segment B begins" }, "B →"));
  const text = tokens.findLastIndex((token) => token.prompt) + 1; // the first token after the prompt's
  if (text > 0) chips.splice(text, 0, el("span", { class: "segment-boundary", id: "prompt-boundary", title: "The dotted chips before this come from the model's prompt, put before the text" }, "text →"));
  container.replaceChildren(...chips);
  container.onclick = (event) => {
    const chip = event.target.closest(".token");
    if (chip) on.select(Number(chip.dataset.index), event.shiftKey);
  };
  container.onpointerover = (event) => {
    const chip = event.target.closest(".token");
    if (chip && event.pointerType === "mouse") on.preview(Number(chip.dataset.index));
  };
  container.onpointerleave = () => on.preview(null);
}

// Only the chips whose state changes are touched; the strip (never the page) scrolls to the selected chip.
export function showSelection(container, selected, also = []) {
  for (const chip of container.querySelectorAll('.token[aria-selected="true"]')) {
    chip.setAttribute("aria-selected", "false");
    chip.classList.remove("also");
  }
  for (const index of also) {
    const chip = container.querySelector(`.token[data-index="${index}"]`);
    chip?.setAttribute("aria-selected", "true");
    chip?.classList.add("also");
  }
  const chip = selected === null ? null : container.querySelector(`.token[data-index="${selected}"]`);
  if (!chip) return;
  chip.setAttribute("aria-selected", "true");
  // Scrolled a whole row at a time: the chip's row at the top, never half a row of chips in sight.
  const top = chip.offsetTop; // the strip is the chips' offset parent
  if (top < container.scrollTop || top + chip.offsetHeight > container.scrollTop + container.clientHeight) {
    container.scrollTop = top - parseFloat(getComputedStyle(container).paddingTop);
  }
}

// A longer run's strip shows a page of STRIP_TOKENS chips at a time, the page holding the selected token
// (← and → in the bar turn pages): building and laying out 8,192 chips held every run (bench/README.md), and
// a strip two rows high shows a few dozen of them anyway; Find and the heatmap reach any token.
const STRIP_TOKENS = 512;
let shown = { run: null, start: 0 }; // the page of chips on screen, for the run on screen

function pageOf(token) {
  return token === null ? 0 : Math.floor(token / STRIP_TOKENS) * STRIP_TOKENS;
}

function showPage(state, lab, start) {
  const tokens = state.run.tokens;
  const strip = byId("tokens");
  const paged = tokens.length > STRIP_TOKENS;
  shown = { run: state.run.run_id, start: paged ? start : 0 };
  const end = Math.min(tokens.length, shown.start + STRIP_TOKENS);
  renderTokens(strip, paged ? tokens.slice(shown.start, end) : tokens, state.token, {
    select: (index, add) => {
      const { token, also } = lab.getState();
      if (add && token !== null && index !== token) {
        lab.setState({ also: also.includes(index) ? also.filter((other) => other !== index) : [...also, index], preview: null });
      } else lab.setState({ token: index === token ? null : index, also: [], preview: null });
    },
    preview: (index) => lab.setState({ preview: index }),
  });
  const pager = byId("tokens-page");
  pager.hidden = !paged;
  if (paged) {
    const turn = (label, to, name) => {
      const button = el("button", { type: "button", "aria-label": name }, label);
      button.disabled = to < 0 || to >= tokens.length;
      button.addEventListener("click", () => showPage(lab.getState(), lab, to));
      return button;
    };
    pager.replaceChildren(
      turn("←", shown.start - STRIP_TOKENS, "Previous tokens"),
      el("span", {}, `${shown.start}–${end - 1}`),
      turn("→", shown.start + STRIP_TOKENS, "Next tokens"),
    );
  }
  showSelection(strip, state.token, state.also);
  strip.scrollTop = state.token === null || state.token < shown.start || state.token >= end ? 0 : strip.scrollTop;
}

export const tokensView = {
  id: "tokens",
  follows: ["run"],
  moves: ["token", "also"],
  render(state, _, lab) {
    byId("tokens-shape").textContent = `N = ${state.run.tokens.length}`;
    showPage(state, lab, pageOf(state.token));
  },
  move(state, lab) {
    const onPage = state.token === null || (state.token >= shown.start && state.token < shown.start + STRIP_TOKENS);
    if (shown.run === state.run.run_id && onPage) showSelection(byId("tokens"), state.token, state.also);
    else showPage(state, lab, pageOf(state.token));
  },
};
