"""A page left open across a server restart: its next click works, on the same run id, with the numbers
the restarted server recomputes from the run's stored spec. The URL never holds a run id."""

from urllib.parse import urlparse

import httpx
import numpy as np
import pytest

from app.web.encoding import decode_attention
from tests.browser.conftest import wait_until
from tests.conftest import LabProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def restartable(tmp_path):
    """A lab of this test's own, so that restarting it disturbs no other test."""
    lab = LabProcess(tmp_path, env={"ATTENTION_LAB_DATA_DIR": str(tmp_path / "data")})
    lab.start()
    yield lab
    lab.stop()


def test_a_page_open_across_a_restart_keeps_working_on_its_next_click(browser, restartable):
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    errors, answers = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and errors.append(f"console: {message.text}"))
    page.on("response", lambda response: answers.append((response.url, response.status)))
    page.goto(restartable.url)
    wait_until(page, "document.body.dataset.run && document.body.dataset.busy === 'false'")
    run = page.evaluate("document.body.dataset.run")
    wait_until(page, f"document.getElementById('heatmap').dataset.view?.startsWith('{run}:0:')")

    restartable.stop()
    restartable.start()
    answers.clear()
    page.select_option("#layer", "3")
    wait_until(page, f"document.getElementById('heatmap').dataset.view?.startsWith('{run}:3:')")

    assert page.evaluate("document.body.dataset.run") == run
    assert page.locator("#error").is_hidden()
    asked = [status for url, status in answers if f"/api/runs/{run}/" in url]
    assert asked and set(asked) == {200}, answers  # the restarted server was asked, and answered
    head = int(page.evaluate("document.getElementById('heatmap').dataset.view.split(':')[2]"))
    n, shown = page.evaluate("(h => [h.n, Array.from(h.matrix)])(document.getElementById('heatmap').heatmap)")
    served = httpx.get(f"{restartable.url}/api/runs/{run}/attention?dtype=float32&layer=3&head={head}")
    weights = decode_attention(served.content, served.headers)[0, 0]
    np.testing.assert_allclose(np.array(shown).reshape(n, n), weights, atol=1e-6)
    assert run not in page.url and run not in urlparse(page.url).query
    assert errors == []
    context.close()
