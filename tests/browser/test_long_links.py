"""A link to a long prompt: short enough for any server, and it opens the same view."""

import random

import pytest

from tests.browser.conftest import wait_until

pytestmark = pytest.mark.slow

GREEK = "αβγδεζηθικλμνξοπρστυφχψω"


def greek_prompt(characters: int) -> str:
    rng = random.Random(3)
    words = []
    while sum(len(word) + 1 for word in words) < characters:
        words.append("".join(rng.choice(GREEK) for _ in range(rng.randint(3, 9))))
    return " ".join(words)[:characters]


def test_a_long_prompt_makes_a_short_link_that_opens_the_same_view(page, server, browser):
    prompt = greek_prompt(13_500)
    page.goto(server)
    wait_until(page, "document.body.dataset.run && document.body.dataset.busy === 'false'")
    page.fill("#prompt", prompt)
    page.press("#prompt", "Enter")
    wait_until(page, "location.hash.startsWith('#z=') && document.body.dataset.busy === 'false'")
    before = page.evaluate("location.hash")
    page.select_option("#layer", "3")
    # The compressed link is written asynchronously (deflate): wait for the one that holds block 3.
    wait_until(page, f"document.body.dataset.busy === 'false' && location.hash !== {before!r}")
    link = page.evaluate("location.href")
    # Random letters barely compress; percent-encoded in the query they would make a 160 kB link.
    assert "?" not in link and len(link) < 16_000
    other = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        other.goto(link)
        wait_until(other, "document.body.dataset.run && document.body.dataset.busy === 'false'")
        assert other.locator("#prompt").input_value() == prompt
        assert other.locator("#layer").input_value() == "3"
    finally:
        other.close()


def test_a_short_prompt_keeps_a_readable_link(page, server):
    page.goto(server)
    page.fill("#prompt", "the river bank flooded")
    page.press("#prompt", "Enter")
    wait_until(page, "new URLSearchParams(location.search).get('text') === 'the river bank flooded'")
    assert "#z=" not in page.url


def test_a_link_over_the_servers_limit_is_answered_in_plain_words(browser, server):
    page = browser.new_page()  # not the checked page: this one is meant to fail to load
    try:
        response = page.goto(f"{server}/?text={'α' * 40_000}")
        assert response.status == 431
        assert "Copy link" in page.locator("body").inner_text()
    finally:
        page.close()
