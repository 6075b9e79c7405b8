"""Issue #45: the page's CSV writer (static/js/export.js csvCell, behind the heatmap's and the scoreboard's
CSV) follows the class's rule, case for case (tests/test_csv_cells.py)."""

import csv
import io

from tests.browser.conftest import wait_until
from tests.test_csv_cells import NUMBER_CASES, TEXT_CASES


def test_the_pages_csv_cells_follow_the_one_rule(page, server):
    page.goto(server)
    wait_until(page, "document.body.dataset.run")
    written = page.evaluate(
        """async (values) => {
             const { csvCell } = await import('/static/js/export.js');
             return values.map(csvCell);
           }""",
        [text for text, _ in TEXT_CASES] + NUMBER_CASES,
    )
    texts, numbers = written[: len(TEXT_CASES)], written[len(TEXT_CASES) :]
    # Each text cell as a spreadsheet reads it: one field, unquoted.
    read = [next(csv.reader(io.StringIO(cell, newline=""))) if cell else [""] for cell in texts]
    assert read == [[cell] for _, cell in TEXT_CASES]
    assert numbers == [str(number) for number in NUMBER_CASES]
