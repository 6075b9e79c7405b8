"""Issue 54: the "Every head" panel's switch ("share on [CLS]+[SEP] (S) and on “.”") is whole at the five projector
sizes in Present and on phones: no part of its text past its panel's box or the window, nothing scrolling sideways,
nothing ellipsised (tests/browser/audit.js on the panel's controls, and its text's own boxes)."""

import pytest

from tests.browser import audit
from tests.browser.test_projectors import PHONES, PROJECTORS, floor
from tests.browser.test_stage import lab_page, open_stage, settle

pytestmark = pytest.mark.slow

TEXT = "a dog saw a cat and a bird near a tree by the barn"

# The switch's text, each line's box, against its panel's visible box and the window (`root`: the page's document
# or the widget's shadow root).
SWITCH = """(root) => {
  const label = root.getElementById('grid-shares').closest('label');
  const panel = label.closest('.panel-body');
  const left = panel.getBoundingClientRect().left + panel.clientLeft;
  const right = left + panel.clientWidth;
  const range = document.createRange();
  range.selectNodeContents(label);
  const lines = [...range.getClientRects()].filter((r) => r.width > 0);
  const px = (x) => Math.round(x);
  const problems = lines.length ? [] : ['the switch is not shown'];
  for (const line of lines) {
    if (line.left < left - 0.5 || line.right > right + 0.5) {
      problems.push(`a line runs ${px(line.left)}–${px(line.right)} px, its panel ${px(left)}–${px(right)}`);
    }
    if (line.left < -0.5 || line.right > innerWidth + 0.5) problems.push('a line is past the window');
  }
  if (panel.scrollWidth > panel.clientWidth) {
    problems.push(`its panel scrolls sideways: ${panel.scrollWidth} px in ${panel.clientWidth}`);
  }
  const ellipsis = getComputedStyle(label).textOverflow === 'ellipsis';
  if (ellipsis && label.scrollWidth > label.clientWidth) problems.push('the switch is ellipsised');
  return { text: label.textContent.trim(), problems };
}"""


def switch(page) -> dict:
    return page.evaluate(f"() => ({SWITCH})(document)")


def test_the_every_head_switch_is_whole_at_every_projector_in_present_and_on_phones(browser, server):
    """One page: Present at each projector size, then the page as a phone reads it at each phone size."""
    problems = []
    with lab_page(browser, *PROJECTORS[0]) as page:
        open_stage(page, server, "present=1", f"text={TEXT}", "token=5", "panel=grid")
        page.wait_for_selector("#grid .grid-cell")
        for (width, height), present in [*((size, True) for size in PROJECTORS), *((size, False) for size in PHONES)]:
            if page.evaluate("document.body.classList.contains('present')") != present:
                page.click("#present")
            page.set_viewport_size({"width": width, "height": height})
            settle(page, ["#panel-grid", "#grid-shares"])
            page.locator("#grid-shares").scroll_into_view_if_needed()
            seen = switch(page)
            assert seen["text"] == "share on [CLS]+[SEP] (S) and on “.”", seen
            found = seen["problems"]
            found += audit.problems(
                page, floor(width) if present else 0, 16 if present else 0, "#panel-grid .controls", not present
            )
            problems += [f"{width}×{height}: {problem}" for problem in found]
    assert problems == [], "\n".join(problems)
