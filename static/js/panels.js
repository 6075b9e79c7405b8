// The stage's switchable area: the views beyond the heatmap and the attends view, one tab each. The open
// panel is state (and so in the URL); the open tab clicked again closes the area. "Enlarge" lays the open
// panel over the whole stage for a while (an experiment read by a class), and back.

import { missing } from "./capabilities.js";
import { el } from "./format.js";
import { bindPopup } from "./popup.js";

export const PANELS = {
  dissection: "Worked example",
  grid: "Every head",
  pipeline: "Pipeline",
  pooled: "Sentence vector",
  lessons: "Experiments",
  write: "Write",
  grow: "Grow a model",
};
// The panels a model without an adapter cannot fill (capabilities.js): their tabs say so, their panels why.
const NEEDS = { dissection: "worked_example", pipeline: "pipeline" };

// What an experiment opens on the stage (a pair, a patched run, a head) is in sight: an enlarged panel lies back.
export function backToStage() {
  if (document.getElementById("views")?.classList.contains("enlarged")) document.getElementById("panel-enlarge").click();
}

// lab: {getState, setState, subscribe}; names: the panels this page has (an encoder-decoder's: every head only).
export function initPanels(lab, names = Object.keys(PANELS)) {
  const tabs = document.getElementById("panel-tabs");
  tabs.replaceChildren(
    ...names.map((name) => {
      const reason = NEEDS[name] && missing(lab.model, NEEDS[name]);
      const unavailable = reason ? { class: "unavailable", title: `Not available for this model: ${reason}` } : {};
      return el("button", { type: "button", role: "tab", id: `panel-tab-${name}`, "aria-controls": `panel-${name}`, dataset: { panel: name }, ...unavailable }, PANELS[name]);
    }),
  );
  // A narrow side column lists the tabs under one button (lab.css): choosing one closes the list.
  const menu = document.getElementById("panel-menu");
  const showMenu = bindPopup(menu, tabs);
  tabs.addEventListener("click", (event) => {
    const tab = event.target.closest("[role=tab]");
    if (!tab) return;
    lab.setState({ panel: lab.getState().panel === tab.dataset.panel ? null : tab.dataset.panel });
    showMenu(false);
  });
  // Arrow keys move between tabs (and open them), as in any tab list; only the current tab is a tab stop.
  tabs.addEventListener("keydown", (event) => {
    const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
    if (!step) return;
    const current = names.indexOf(lab.getState().panel);
    const next = names[(current + step + names.length) % names.length];
    lab.setState({ panel: next });
    document.getElementById(`panel-tab-${next}`).focus();
    event.preventDefault();
    event.stopPropagation();
  });
  const enlarge = document.getElementById("panel-enlarge");
  const views = document.getElementById("views");
  enlarge.addEventListener("click", () => {
    const on = !views.classList.contains("enlarged");
    views.classList.toggle("enlarged", on);
    enlarge.setAttribute("aria-pressed", String(on));
    enlarge.textContent = on ? "Back to the stage" : "Enlarge";
  });
  const show = ({ panel }) => {
    document.querySelector(".panels").classList.toggle("open", panel !== null);
    menu.textContent = panel === null ? "More views" : `${PANELS[panel]} ▾`;
    enlarge.hidden = panel === null;
    if (panel === null && views.classList.contains("enlarged")) enlarge.click();
    names.forEach((name, index) => {
      const tab = document.getElementById(`panel-tab-${name}`);
      tab.setAttribute("aria-selected", String(name === panel));
      tab.tabIndex = name === panel || (panel === null && index === 0) ? 0 : -1;
      document.getElementById(`panel-${name}`).hidden = name !== panel;
    });
  };
  lab.subscribe((state, changed) => changed.has("panel") && show(state));
  show(lab.getState());
  showCost(lab);
}

// Where the side column stacks the attends view over the open panel (lab.css: one screen, narrower than a
// wide screen's side by side).
const STACKED = "(min-width: 900px) and (min-height: 500px) and (max-width: 1499px)";

// Presentation mode shows every row of a short prompt in the attends view, but an open panel under it takes
// more than half the column, which then holds 6 to 9 of 16 rows from 1024×768 to 1366×768: a panel would get
// too little room to read if the rows kept theirs. So the panel says, under its tabs (at its own cost, not
// the rows'), how many of the rows above are in sight, and one click closes it and gives them back.
function showCost(lab) {
  const attends = document.getElementById("attends");
  const cost = document.getElementById("panel-cost");
  const stacked = matchMedia(STACKED);
  const update = () => {
    const { panel, present } = lab.getState();
    const view = attends.getBoundingClientRect();
    const rows = [...attends.querySelectorAll(".attend-keys > li[data-index]")];
    const seen = rows.filter((row) => {
      const box = row.getBoundingClientRect();
      return box.top >= view.top - 0.5 && box.bottom <= view.bottom + 0.5;
    }).length;
    cost.hidden = !(present && panel !== null && stacked.matches && seen < rows.length);
    if (cost.hidden) return;
    document.getElementById("panel-cost-rows").textContent = `${seen} of ${rows.length} rows in sight above.`;
    document.getElementById("panel-cost-close").title = `Close ${PANELS[panel]}: the attends view takes its room back`;
  };
  new ResizeObserver(update).observe(attends);
  new MutationObserver(update).observe(attends, { childList: true });
  attends.addEventListener("scroll", update, { passive: true });
  lab.subscribe((state, changed) => (changed.has("panel") || changed.has("present")) && update());
  document.getElementById("panel-cost-close").addEventListener("click", () => lab.setState({ panel: null }));
}
