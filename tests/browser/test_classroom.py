"""A live class in chromium: a teacher page, learner pages on a projector's and a phone's size, and
simulated learners answering through the API; once on one lab process, once on two sharing a real Redis."""

import time

import httpx
import pytest

from tests.browser.conftest import screenshot, wait_until
from tests.conftest import LabProcess

pytestmark = pytest.mark.slow


@pytest.fixture(params=["one process", "two processes over redis"])
def labs(request, server, tmp_path, redis_server):
    """(the teacher's lab, the learners' lab): the same one, or two processes sharing a class over Redis."""
    if request.param == "one process":
        yield server, server
        return
    env = {"ATTENTION_LAB_STORE": redis_server.url}
    processes = []
    for name in "ab":
        (tmp_path / name).mkdir()
        processes.append(LabProcess(tmp_path / name, env=env))
    for process in processes:
        process.start()
    yield processes[0].url, processes[1].url
    for process in processes:
        process.stop()


def selected(page) -> tuple[str, str, str | None]:
    chip = page.locator('#tokens .token[aria-selected="true"]')
    return (
        page.locator("#layer").input_value(),
        page.locator("#head").input_value(),
        chip.first.get_attribute("data-index") if chip.count() else None,
    )


def wait_selected(page, expected, timeout=1.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if selected(page) == expected:
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"learner shows {selected(page)}, not {expected}, after {timeout} s")


def test_a_class_follows_the_teacher_answers_together_and_cannot_drive(page, browser, labs):
    teacher_lab, learner_lab = labs
    page.goto(teacher_lab)
    wait_until(page, "document.body.dataset.run && document.body.dataset.busy === 'false'")
    page.click("#class-start")
    wait_until(page, "document.getElementById('class-join').href.includes('?class=')")
    code = page.locator("#class-code").inner_text()
    join = page.locator("#class-join").get_attribute("href").replace(teacher_lab, learner_lab)
    assert page.locator("#class-qr").evaluate("img => img.complete && img.naturalWidth > 0")
    learners = []
    for size in ({"width": 1280, "height": 720}, {"width": 390, "height": 844}, {"width": 390, "height": 844}):
        context = browser.new_context(viewport=size)
        learner = context.new_page()
        learner.goto(join)
        wait_until(learner, "document.body.dataset.run && document.body.dataset.busy === 'false'")
        learners.append(learner)
    try:
        wait_until(page, "document.getElementById('class-presence').dataset.following === '3'")
        # The teacher moves: block, head, token. Every following learner shows it within a second.
        page.select_option("#layer", "4")
        page.select_option("#head", "7")
        page.locator('#tokens .token[data-index="3"]').click()
        for learner in learners:
            assert wait_selected(learner, ("4", "7", "3")) < 1
        # A learner who goes free stays where it is.
        free = learners[2]
        free.click("#class-follow")
        wait_until(page, "document.getElementById('class-presence').dataset.following === '2'")
        page.select_option("#head", "2")
        for learner in learners[:2]:
            wait_selected(learner, ("4", "2", "3"))
        time.sleep(0.5)
        assert selected(free) == ("4", "7", "3")
        # A new prompt reaches the class too, and runs there.
        page.fill("#prompt", "the river bank flooded")
        page.press("#prompt", "Enter")
        wait_until(
            learners[0],
            "document.querySelectorAll('#tokens .token').length === 6 && document.body.dataset.busy === 'false'",
        )
        page.locator('#tokens .token[data-index="2"]').click()
        wait_selected(learners[0], ("4", "2", "2"))
        # Ask the class: 30 simulated learners and one page answer; the teacher sees the histogram.
        page.click("#class-ask")
        learners[1].wait_for_selector("#class-question .choices button")
        learners[1].locator('#class-question .choices button[data-index="1"]').click()
        question = httpx.get(f"{learner_lab}/api/classes/{code}").json()["question"]
        with httpx.Client(base_url=learner_lab) as client:
            for number in range(30):
                learner_id = client.post(f"/api/classes/{code}/learners", json={}).json()["learner"]
                answer = {"question": question["id"], "token": number % 4}
                assert client.post(f"/api/classes/{code}/learners/{learner_id}/answers", json=answer).status_code == 200
        wait_until(page, "document.getElementById('class-tally').dataset.total === '31'")
        counts = {
            row.get_attribute("data-token"): int(row.get_attribute("data-count"))
            for row in page.locator("#class-tally .tally-row").all()
        }
        assert counts == {"0": 8, "1": 9, "2": 7, "3": 7}
        assert "null" not in page.locator("#class-tally").inner_text()  # no answer line before the reveal
        screenshot(page, "class-teacher-1280x720")
        page.click("#class-reveal")
        learners[1].wait_for_selector('#class-question [data-field="reveal"]')
        screenshot(learners[1], "class-learner-phone-390")
        # A learner cannot drive the class: the teacher's action without the secret is refused.
        status = learners[0].evaluate(
            """code => fetch(`/api/classes/${code}/view`, {method: 'PUT', headers: {'content-type': 'application/json'},
               body: JSON.stringify({view: {layer: 0}})}).then(response => response.status)""",
            code,
        )
        assert status == 403
    finally:
        for learner in learners:
            learner.context.close()
        page.goto("about:blank")  # the teacher's event stream ends here, not cut by the labs stopping
