// What a class reads, audited on screen (tests/browser/audit.py reads these two functions): every visible
// text and control in `scope`, whether it is cut (its own box clips it: scrollWidth past clientWidth with
// overflow not visible; an ancestor that clips hides part of it; an ancestor that scrolls hides it sideways,
// but for the views made to scroll so: a long input's grids, a table wider than a phone), ellipsised, past the window, or under the type
// floor (`labelFloor` for labels, ids, tick labels and numbers, `floor` for the rest). Scrolled away up or down
// inside a scroller is how a long panel reads: the reader scrolls to it. `pageScrolls`: a phone's page scrolls
// down, so only sideways is off-screen there. `within`: where `scope` is looked for (a widget's shadow root).
({ floor, labelFloor, scope, pageScrolls = false, within = document }) => {
  const problems = [];
  const SIDEWAYS = ".scroll-x, .patch-grid, .head-roles, .ablation-grid, .hm-plot, .numbers-table, .softmax";
  const LABELS = [
    ".hm-ylabels", ".hm-xlabels", ".token", ".attend-queries", ".attend-keys", ".attend-weight", ".tally-count",
    ".hm-colorbar", ".hm-zoom-label", ".tally-label", ".readout", ".round-share", ".token-id",
  ].join(", ");
  const CONTROLS = "button, select, input:not([type=hidden]):not([type=file]), textarea, summary, [role=tab], a[href]";
  const NUMERIC = /^[\s\d.,:%×−+\-–=#[\]A-Z()]*\d[\s\d.,:%×−+\-–=#[\]()]*$/;
  const name = (node) => (node.id ? `#${node.id}` : [node.tagName.toLowerCase(), ...node.classList].join("."));
  const say = (node) => {
    const text = (node.innerText ?? node.textContent ?? node.value ?? "").trim().replace(/\s+/g, " ");
    return `${name(node)} “${text.slice(0, 30)}”`;
  };
  const visible = (node) =>
    node.checkVisibility({ visibilityProperty: true, opacityProperty: true }) && !node.closest(".visually-hidden");
  const nodes = new Set();
  for (const root of within.querySelectorAll(scope)) {
    for (const node of root.querySelectorAll(CONTROLS)) nodes.add(node);
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let text = walker.nextNode(); text; text = walker.nextNode()) {
      const parent = text.parentElement;
      if (text.textContent.trim() && !parent.closest("script, style, option, svg")) nodes.add(parent);
    }
  }
  // How wide a text is at a node's font, to the subpixel (scrollWidth rounds: a label 0.2 px too wide for its
  // box is ellipsised, and scrollWidth says it fits).
  const textWidth = (text, style) => {
    const probe = document.createElement("span");
    probe.textContent = text;
    probe.style.cssText = `font:${style.font};letter-spacing:${style.letterSpacing};position:absolute;visibility:hidden;white-space:pre`;
    document.body.append(probe);
    const width = probe.getBoundingClientRect().width;
    probe.remove();
    return width;
  };
  const room = (node, style) => {
    const sides = ["paddingLeft", "paddingRight", "borderLeftWidth", "borderRightWidth"];
    // The used width, to the subpixel and before any transform (a tick label turned 60° is as wide as ever).
    const width = style.boxSizing === "border-box" ? parseFloat(style.width) : parseFloat(style.width) + sides.reduce((sum, side) => sum + parseFloat(style[side]), 0);
    return width - sides.reduce((sum, side) => sum + parseFloat(style[side]), 0);
  };
  // The shown option of a select, against the room the select gives it beside its arrow.
  const selectCut = (node, style) => {
    const option = node.selectedOptions[0];
    if (!option) return null;
    const need = textWidth(option.textContent, style);
    const space = room(node, style) - 16;
    return need > space + 0.02 ? `cut: ${say(node)} shows “${option.textContent}” in ${Math.round(space)} of ${Math.round(need)} px` : null;
  };
  // A box that clips its own text: wider than its room (one line of text alone, measured to the subpixel), or
  // content wider than it (scrollWidth).
  const overflows = (node, style) => {
    const single = node.children.length === 0 && ["pre", "nowrap"].includes(style.whiteSpace);
    if (single) return textWidth(node.textContent, style) > room(node, style) + 0.02;
    return node.scrollWidth > node.clientWidth + 1;
  };
  // The first ancestor that hides part of the box, in words; "scrolled" when a scroller has it out of sight.
  const clipped = (node, r) => {
    for (let up = node.parentElement; up && up !== document.documentElement; up = up.parentElement) {
      const s = getComputedStyle(up);
      if (s.overflowX === "visible" && s.overflowY === "visible") continue;
      const b = up.getBoundingClientRect();
      const left = b.left + up.clientLeft;
      const top = b.top + up.clientTop;
      const right = left + up.clientWidth;
      const bottom = top + up.clientHeight;
      const outside = r.right <= left + 0.5 || r.left >= right - 0.5 || r.bottom <= top + 0.5 || r.top >= bottom - 0.5;
      const sideways = r.left < left - 0.5 || r.right > right + 0.5;
      const partly = !outside && (sideways || r.top < top - 0.5 || r.bottom > bottom + 0.5);
      if (["auto", "scroll"].includes(s.overflowX) || ["auto", "scroll"].includes(s.overflowY)) {
        if (sideways && !up.matches(SIDEWAYS)) return `cut sideways by ${name(up)}`;
        if (outside || partly) return "scrolled";
        continue;
      }
      if (outside) return `hidden by ${name(up)}`;
      if (partly) return `cut by ${name(up)}`;
    }
    return null;
  };
  for (const node of nodes) {
    if (!visible(node)) continue;
    const r = node.getBoundingClientRect();
    if (r.width <= 1 || r.height <= 1) continue; // not drawn, or drawn for screen readers only
    const style = getComputedStyle(node);
    if (node.tagName === "SELECT") {
      const cut = selectCut(node, style);
      if (cut) problems.push(cut);
    } else if (node.tagName === "TEXTAREA") {
      if (node.scrollHeight > node.clientHeight + 1) problems.push(`cut: ${say(node)} shows part of its text`);
    } else if (node.tagName === "INPUT") {
      // a one-line field scrolls its text as it is typed: its box is what a reader needs in sight
    } else if (style.overflowX !== "visible" && !["auto", "scroll"].includes(style.overflowX) && overflows(node, style)) {
      problems.push(`${style.textOverflow === "ellipsis" ? "ellipsised" : "cut"}: ${say(node)}`);
    }
    const clip = clipped(node, r);
    if (clip && clip !== "scrolled") problems.push(`${clip}: ${say(node)}`);
    if (clip) continue;
    const past = r.left < -0.5 || r.right > innerWidth + 0.5 || (!pageScrolls && (r.top < -0.5 || r.bottom > innerHeight + 0.5));
    if (past) problems.push(`off-screen: ${say(node)} at ${[r.left, r.top, r.right, r.bottom].map(Math.round)}`);
    const own = [...node.childNodes].filter((child) => child.nodeType === 3).map((child) => child.textContent).join("");
    const least = node.closest(LABELS) || NUMERIC.test(own.trim()) ? labelFloor : floor;
    const size = parseFloat(style.fontSize);
    if (size < least - 0.01) problems.push(`small: ${size}px < ${least}: ${say(node)}`);
  }
  return [...new Set(problems)];
}
