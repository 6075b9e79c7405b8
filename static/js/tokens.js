// The token strip: one chip per subword piece, its id below; click or arrow keys select a token.

import { el } from "./format.js";

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
        el("span", { class: "token-text" }, token.text),
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
  const top = chip.offsetTop; // the strip is the chips' offset parent
  if (top < container.scrollTop || top + chip.offsetHeight > container.scrollTop + container.clientHeight) {
    container.scrollTop = top - container.clientHeight / 2;
  }
}

export const tokensView = {
  id: "tokens",
  follows: ["run"],
  moves: ["token", "also"],
  render(state, _, lab) {
    document.getElementById("tokens-shape").textContent = `N = ${state.run.tokens.length}`;
    renderTokens(document.getElementById("tokens"), state.run.tokens, state.token, {
      select: (index, add) => {
        const { token, also } = lab.getState();
        if (add && token !== null && index !== token) {
          lab.setState({ also: also.includes(index) ? also.filter((other) => other !== index) : [...also, index], preview: null });
        } else lab.setState({ token: index === token ? null : index, also: [], preview: null });
      },
      preview: (index) => lab.setState({ preview: index }),
    });
    showSelection(document.getElementById("tokens"), state.token, state.also);
  },
  move: (state) => showSelection(document.getElementById("tokens"), state.token, state.also),
};
