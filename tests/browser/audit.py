"""What a class reads, audited on screen (tests/browser/audit.js): every visible text and control cut,
ellipsised, past the window or under the type floor, in words; and which of the attends view's rows are in
sight."""

from pathlib import Path

AUDIT = (Path(__file__).with_name("audit.js")).read_text()

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


def problems(page, floor: float, label_floor: float, scope: str, page_scrolls: bool = False, within=None) -> list[str]:
    """`within`: a handle of the node `scope` is looked for in (a widget's shadow root); the page's document if
    none."""
    found = {"floor": floor, "labelFloor": label_floor, "scope": scope, "pageScrolls": page_scrolls}
    return page.evaluate(AUDIT, {**found, **({"within": within} if within is not None else {})})
