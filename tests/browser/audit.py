"""What a class reads, audited on screen: every visible text and control, whether it is cut (its own box or an
ancestor that clips), ellipsised, past the window, or under the type floor."""

# A text is "cut" when its own box clips it (scrollWidth past clientWidth with overflow not visible), when an
# ancestor that clips (overflow hidden/clip) hides part of it, or when an ancestor that scrolls hides it sideways
# (but for the views made to scroll so: a long input's grids). Scrolled away up or down in a scroller is how a
# long panel reads: the reader scrolls to it.
AUDIT = """({ floor, labelFloor, scope }) => {
  const problems = [];
  const vw = innerWidth, vh = innerHeight;
  const say = (node) => {
    const name = node.id ? `#${node.id}` : `${node.tagName.toLowerCase()}${node.classList.length ? '.' + [...node.classList].join('.') : ''}`;
    const text = (node.innerText ?? node.textContent ?? node.value ?? '').trim().replace(/\\s+/g, ' ').slice(0, 30);
    return `${name} “${text}”`;
  };
  const visible = (node) => node.checkVisibility({ visibilityProperty: true, opacityProperty: true }) && !node.closest('.visually-hidden');
  const controls = 'button, select, input:not([type=hidden]):not([type=file]), textarea, summary, [role=tab], a[href]';
  const SIDEWAYS = '.scroll-x, .patch-grid, .head-roles, .hm-plot';
  const LABELS = '.hm-ylabels, .hm-xlabels, .token, .attend-queries, .attend-keys, .attend-weight, .tally-count, .hm-colorbar, .hm-zoom-label, .tally-label, .readout, .round-share, .token-id';
  const numeric = /^[\\s\\d.,:%×−+\\-–=#\\[\\]A-Z()]*\\d[\\s\\d.,:%×−+\\-–=#\\[\\]()]*$/;
  const nodes = new Set();
  for (const root of document.querySelectorAll(scope)) {
    for (const node of root.querySelectorAll(controls)) nodes.add(node);
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let text = walker.nextNode(); text; text = walker.nextNode()) {
      if (text.textContent.trim() && !text.parentElement.closest('script, style, option, svg')) nodes.add(text.parentElement);
    }
  }
  for (const node of nodes) {
    if (!visible(node)) continue;
    const r = node.getBoundingClientRect();
    if (r.width <= 1 || r.height <= 1) continue; // not drawn, or drawn for screen readers only
    const style = getComputedStyle(node);
    // cut in its own box
    if (style.overflowX !== 'visible' && node.scrollWidth > node.clientWidth + 1 && !['auto', 'scroll'].includes(style.overflowX) && node.tagName !== 'SELECT') {
      problems.push(`cut: ${say(node)} (${node.scrollWidth} > ${node.clientWidth})`);
    } else if (style.textOverflow === 'ellipsis' && node.scrollWidth > node.clientWidth + 1) {
      problems.push(`ellipsised: ${say(node)}`);
    }
    if (node.tagName === 'SELECT') {
      const option = node.selectedOptions[0];
      if (option) {
        const probe = document.createElement('span');
        probe.textContent = option.textContent;
        probe.style.cssText = `font:${style.font};position:absolute;visibility:hidden;white-space:pre`;
        document.body.append(probe);
        const need = probe.getBoundingClientRect().width;
        probe.remove();
        const room = node.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 16;
        if (need > room + 1) problems.push(`cut: ${say(node)} shows “${option.textContent}” in ${Math.round(room)} of ${Math.round(need)} px`);
      }
    }
    // clipped by ancestors
    let box = { left: r.left, top: r.top, right: r.right, bottom: r.bottom };
    let scrolled = null;
    for (let up = node.parentElement; up && up !== document.documentElement; up = up.parentElement) {
      const s = getComputedStyle(up);
      if (s.overflowX === 'visible' && s.overflowY === 'visible') continue;
      const b = up.getBoundingClientRect();
      const inner = { left: b.left + up.clientLeft, top: b.top + up.clientTop, right: b.left + up.clientLeft + up.clientWidth, bottom: b.top + up.clientTop + up.clientHeight };
      const scrolls = ['auto', 'scroll'].includes(s.overflowX) || ['auto', 'scroll'].includes(s.overflowY);
      const outside = box.right <= inner.left + 0.5 || box.left >= inner.right - 0.5 || box.bottom <= inner.top + 0.5 || box.top >= inner.bottom - 0.5;
      const partly = !outside && (box.left < inner.left - 0.5 || box.right > inner.right + 0.5 || box.top < inner.top - 0.5 || box.bottom > inner.bottom + 0.5);
      if (scrolls) {
        // Scrolled away up or down is how a long panel reads; sideways only where a view means to scroll so.
        const sideways = box.left < inner.left - 0.5 || box.right > inner.right + 0.5;
        if (sideways && !up.matches(SIDEWAYS)) { problems.push(`cut sideways by ${say(up).split(' ')[0]}: ${say(node)}`); scrolled = 'hidden'; break; }
        if (outside || partly) { scrolled = up; break; }
        continue;
      }
      if (outside) { problems.push(`hidden by ${say(up).split(' ')[0]}: ${say(node)}`); scrolled = 'hidden'; break; }
      if (partly) { problems.push(`cut by ${say(up).split(' ')[0]}: ${say(node)}`); scrolled = 'hidden'; break; }
    }
    if (scrolled === 'hidden') continue;
    if (scrolled) { node.dataset.auditScrolled = say(scrolled).split(' ')[0]; }
    else if (r.left < -0.5 || r.top < -0.5 || r.right > vw + 0.5 || r.bottom > vh + 0.5) problems.push(`off-screen: ${say(node)} at ${Math.round(r.left)},${Math.round(r.top)}–${Math.round(r.right)},${Math.round(r.bottom)}`);
    // type floor
    const size = parseFloat(style.fontSize);
    const ownText = [...node.childNodes].filter((c) => c.nodeType === 3).map((c) => c.textContent).join('').trim();
    const least = node.closest(LABELS) || numeric.test(ownText) ? labelFloor : floor;
    if (size < least - 0.01) problems.push(`small: ${size}px < ${least}: ${say(node)}`);
  }
  return [...new Set(problems)];
}"""

# Which rows of the attends view are in sight (inside the view's own scroll box and the window).
ATTENDS_ROWS = """() => {
  const view = document.getElementById('attends').getBoundingClientRect();
  const rows = [...document.querySelectorAll('#attends .attend-keys > li[data-index]')];
  const seen = rows.filter((row) => {
    const b = row.getBoundingClientRect();
    return b.height > 0 && b.top >= view.top - 0.5 && b.bottom <= Math.min(view.bottom, innerHeight) + 0.5;
  });
  return { rows: rows.length, seen: seen.length };
}"""
