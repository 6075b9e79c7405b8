"""Issue 54: what a learner's phone says about its vote is true. An anonymous class, started from the teacher's
panel: three learners' pages (two phones and a laptop, each holding a nickname from an earlier class) are asked
no name, say that their answers are anonymous, and never send the name; they vote, the teacher reveals, and the
answers' CSV numbers them. Every sentence on a learner's bar starts with a capital."""

import httpx
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.browser.conftest import wait_until
from tests.browser.test_classroom import (
    answers_csv,
    choice_labels,
    counted,
    end_class,
    lowercase_sentences,
    new_page,
    ready,
    revealed,
    viewport_shot,
    vote_on,
)

NICKNAMES = ["Quokka-Ada-54", "Wombat-Bo-54", "Numbat-Cy-54"]
SIZES = [(390, 844), (360, 740), (1280, 720)]


def serious(page) -> list[str]:
    """axe-core's serious and critical violations on the page as it is."""
    violations = Axe().run(page).response["violations"]
    return [f"{v['id']}: {v['help']}" for v in violations if v["impact"] in ("serious", "critical")]


def test_an_anonymous_class_asks_no_name_says_so_and_its_csv_numbers_the_learners(browser, server):
    errors = []
    teacher = new_page(browser, 1280, 720, errors, bypass_csp=True)  # axe-core's script in
    teacher.goto(f"{server}/?text=the+river+bank+was+steep&layer=0&head=1&token=2")
    ready(teacher)
    teacher.click("#class-start")
    expect(teacher.locator("#class-anonymous-start")).not_to_be_checked()
    teacher.check("#class-anonymous-start")
    assert serious(teacher) == []
    teacher.click("#class-open")
    wait_until(teacher, "document.getElementById('class-join').href.includes('?class=')")
    started = teacher.evaluate("JSON.parse(sessionStorage.getItem('attention-lab-class'))")
    learners, sent = [], []
    try:
        assert started["anonymous"] is True
        expect(teacher.locator("#class-names")).to_have_text("Anonymous: no names kept; the CSV numbers learners.")
        expect(teacher.locator("#class-opening")).to_be_hidden()
        for (width, height), name in zip(SIZES, NICKNAMES, strict=True):
            learner = new_page(browser, width, height, errors, bypass_csp=True)
            # A name this browser gave an earlier class: never sent to this one.
            learner.add_init_script(f"localStorage.setItem('attention-lab-nickname', {name!r})")
            learner.on("request", lambda request: sent.append(f"{request.url} {request.post_data or ''}"))
            learner.goto(started["join_url"])
            ready(learner)
            expect(learner.locator("#class-anonymous")).to_have_text("Anonymous class: your answers carry no name")
            expect(learner.locator("#class-anonymous")).to_be_visible()
            expect(learner.locator("#class-name")).to_be_hidden()
            expect(learner.locator("#class-name-edit")).to_be_hidden()
            box = learner.locator("#class-anonymous").bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= width, box
            learners.append(learner)
        wait_until(teacher, "document.getElementById('class-presence').dataset.following === '3'")
        teacher.click("#class-ask")
        labels = choice_labels(learners[0])
        chosen = [labels[0], labels[1], labels[0]]
        for learner, label in zip(learners, chosen, strict=True):
            vote_on(learner, label)
            who = learner.locator('#class-question [data-field="who-sees"]')
            expect(who).to_have_text(
                "Your answers are anonymous: the class sees only the tally, and the teacher's file numbers "
                "learners without names."
            )
            assert lowercase_sentences(learner) == []
        viewport_shot(learners[0], "class-anonymous-phone-390")
        assert serious(learners[0]) == []
        counted(teacher, 3)
        teacher.click("#class-reveal")
        revealed(server, started["code"])
        for learner in learners:
            learner.wait_for_selector('#class-question [data-field="score"]')
            assert lowercase_sentences(learner) == []
        rows = answers_csv(server, started)
        votes = [(row["learner"], row["round 1"]) for row in rows if row["row"] == "learner"]
        assert votes == list(zip(["learner 1", "learner 2", "learner 3"], chosen, strict=True))
        text = httpx.get(
            f"{server}/api/classes/{started['code']}/answers.csv", headers={"X-Class-Secret": started["secret"]}
        ).text
        leaked = [name for name in NICKNAMES if name in text or any(name in request for request in sent)]
        assert leaked == [], leaked
        assert errors == [], errors
    finally:
        for page in [*learners, teacher]:
            page.context.close()
        end_class(server, started)
