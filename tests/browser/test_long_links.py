"""A link to a long prompt: short enough for any server, and it opens the same view; a crafted or damaged link
opens the lab without its view within a second, saying why."""

import base64
import random
import time
import zlib

import pytest

from tests.browser.conftest import screenshot, wait_until

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


def crafted(head: bytes, repeat: bytes, times: int, tail: bytes) -> str:
    """A #z= link as the page makes them (deflate-raw, then base64url) of head + repeat × times + tail,
    compressed a megabyte at a time: the test never holds what the link inflates to."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts = [squeeze.compress(head)]
    per_block = max(1, 2**20 // len(repeat))
    for start in range(0, times, per_block):
        parts.append(squeeze.compress(repeat * min(per_block, times - start)))
    parts.append(squeeze.compress(tail) + squeeze.flush())
    return base64.urlsafe_b64encode(b"".join(parts)).decode().rstrip("=")


READING_SECONDS = 0.2  # the page's own reading of a link: 2 ms for the 300 MB one; one piece took 0.8 s
OPENING_SECONDS = 5  # the whole page, on a busy machine: a tab that froze never opened


def opens_or_is_refused(browser, url: str, name: str) -> tuple[float, str]:
    """Opens the link in a fresh page, which must open the lab without the link's view (its default run shown)
    and say why on its error line; then times, in that page, the reading the page did of the link on opening
    (a page's load time is the machine's, not the link's). The seconds the reading took, and what the page said."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        start = time.monotonic()
        page.goto(url, wait_until="commit")
        wait_until(page, "document.body.dataset.run && !document.getElementById('error').hidden", timeout=20)
        assert time.monotonic() - start < OPENING_SECONDS
        said = page.locator("#error").inner_text()
        assert page.locator("#prompt").input_value().strip()  # the lab opened with its own prompt
        screenshot(page, f"link-{name}")
        took, refused = page.evaluate(
            """async (url) => {
                const module = document.querySelector("link[rel=modulepreload][href$='/state.js']").href;
                const { viewOfURL } = await import(module);
                const start = performance.now();
                try {
                  await viewOfURL(url);
                  return [(performance.now() - start) / 1000, null];
                } catch (error) {
                  return [(performance.now() - start) / 1000, error.message];
                }
            }""",
            url,
        )
    finally:
        page.close()
    assert errors == []
    assert refused == said
    return took, said


@pytest.mark.parametrize(
    ("name", "head", "repeat", "times", "tail", "size_kb", "said"),
    [
        ("300mb", b'[["text","', b"a", 300 * 10**6, b'"]]', (380, 420), "larger than the lab makes"),
        ("50mb", b'[["text","', b"ab", 25 * 10**6, b'"]]', (60, 75), "larger than the lab makes"),
        ("million-with", b'[["text","hi"],["token","1"],["with","0', b",0", 999_999, b'"]]', (2, 4), "larger"),
    ],
)
def test_a_crafted_link_is_refused_at_once_saying_why(browser, server, name, head, repeat, times, tail, size_kb, said):
    """A #z= link inflating to 300 MB (408 KB), to 50 MB (68 KB), and a 2.7 KB one whose `with` lists a
    million tokens (2 MB inflated): each once crashed or froze the tab; now the page reads each at once and
    opens without the link's view, saying why."""
    link = crafted(head, repeat, times, tail)
    assert size_kb[0] * 1000 <= len(link) <= size_kb[1] * 1000, len(link)
    took, message = opens_or_is_refused(browser, f"{server}/#z={link}", name)
    print(f"{name}: a {len(link) / 1000:.1f} kB link read in {took * 1000:.1f} ms and refused: {message}")
    assert said in message and took < READING_SECONDS


def test_a_list_longer_than_a_view_can_hold_is_refused(browser, server):
    """In the readable form too: `with` past the tokens a run reads, `heads` past the model's heads."""
    for name, query in (
        ("with", f"?text=hello&token=1&with={','.join(['1'] * 20_000)}"),
        ("heads", f"?text=hello&head=mean&heads={','.join(['0'] * 13)}"),
    ):
        took, message = opens_or_is_refused(browser, f"{server}/{query}", f"list-{name}")
        assert "lists more" in message and took < READING_SECONDS, (took, message)


def test_a_damaged_link_opens_the_lab_saying_so(browser, server):
    took, message = opens_or_is_refused(browser, f"{server}/#z=not-deflate-at-all", "damaged")
    assert "damaged" in message and took < READING_SECONDS
