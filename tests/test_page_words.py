"""Issue #44 item 10: no word of a page is a Python repr or a template placeholder. The pages as the server
renders them, every text node, every option, and every title, aria-label, placeholder and alt (what a
tooltip or a screen reader says), are read with the standard library's HTML parser; the browser's version
(tests/browser/test_words.py) opens the menus and panels the scripts fill."""

import re
from html.parser import HTMLParser

import pytest

# Python's repr of a method or an object, a placeholder Jinja or a script left unfilled, a number that is not.
LEAKS = ("object at 0x", "<built-in", "<bound method", "{{", "}}", "undefined", "NaN", "[object Object]")
SPOKEN = ("title", "aria-label", "placeholder", "alt", "aria-description", "data-hint")
# `None` is English too ("None of the heads…"): a leak only where a value belongs, as the whole value or after
# a colon or an equals sign.
NONE_AS_VALUE = re.compile(r"^\s*None\s*$|[:=]\s*None\b")


class Words(HTMLParser):
    """What a page says: its text outside scripts and styles, and the spoken attributes, with where each is."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.words: list[tuple[str, str]] = []  # (where, what)
        self.path: list[str] = []

    def handle_starttag(self, tag, attrs):
        where = self.where(tag, attrs)
        for name, value in attrs:
            if name in SPOKEN and value is not None:
                self.words.append((f"{where}[{name}]", value))
        if tag not in ("meta", "link", "input", "br", "img", "hr", "source"):
            self.path.append(where)

    def handle_endtag(self, tag):
        while self.path:
            if self.path.pop().split("#")[0].split(".")[0] == tag:
                break

    def handle_data(self, data):
        if not any(where.startswith(("script", "style")) for where in self.path[-1:]) and data.strip():
            self.words.append((" > ".join(self.path[-3:]), data))

    @staticmethod
    def where(tag, attrs):
        found = dict(attrs)
        return tag + (f"#{found['id']}" if found.get("id") else "")


def leaked(words: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (where, what) pairs whose words hold a repr, a placeholder or a None where a value belongs."""
    return [(where, what) for where, what in words if any(leak in what for leak in LEAKS) or NONE_AS_VALUE.search(what)]


def leaks(html: str) -> list[tuple[str, str]]:
    parser = Words()
    parser.feed(html)
    return leaked(parser.words)


def test_the_check_finds_each_kind_of_leak():
    page = (
        '<p title="a {{ b }}">x</p><p>attention weight, &lt;built-in method values of dict object at 0x7f&gt;: y</p>'
        "<select><option>[object Object]</option><option>None</option></select><span aria-label='NaN'></span>"
        "<script>const a = {b: {c: 1}}; let u = undefined;</script><p>None of the heads moves it.</p>"
    )
    assert [where for where, _ in leaks(page)] == [
        "p[title]",
        "p",
        "select > option",
        "select > option",
        "span[aria-label]",
    ]


@pytest.mark.parametrize("path", ["/", "/atlas"])
def test_no_page_says_a_repr_or_a_placeholder(client, path):
    response = client.get(path)
    assert response.status_code == 200
    assert leaks(response.text) == []


def test_the_measure_help_says_each_measures_range(client):
    """The help's line per measure reads its declared range, not the dict's `values` method."""
    html = client.get("/").text
    for key, wording in (("weights", "0 to 1; each row sums to 1"), ("norm", "0 and up (a length, not a weight)")):
        line = re.search(rf'<p class="measure-line" data-measure="{key}">(.*?)</p>', html).group(1)
        assert f"</code>, {wording}: " in line
