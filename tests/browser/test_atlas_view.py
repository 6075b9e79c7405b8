"""The head atlas page in chromium: the grid and the scatter draw the API's numbers, a clicked head shows
its corpus label and top examples, and an example opens the lab at its block, head and token."""

import time

from playwright.sync_api import expect

from tests.browser.conftest import screenshot, wait_until
from tests.browser.test_lessons import open_lesson

CORPUS = "\n".join(
    [
        "The cat sat on the mat and looked at the door.",
        "A student asked the teacher why the sky is blue.",
        "The bank raised its interest rate again this year.",
        "We sat on the bank of the river and watched the boats.",
        "Rain fell all night, and the river rose by a metre.",
        "The keys that I lost were in my coat all along.",
    ]
)


def on_screen(page, trace: int, point: int) -> tuple[float, float]:
    """Where point `point` of the q/k plot's trace `trace` (0: queries, 1: keys) is drawn on the page."""
    return page.evaluate(
        """([trace, point]) => {
        const plot = document.getElementById('atlas-space'), layout = plot._fullLayout;
        const box = plot.querySelector('.nsewdrag').getBoundingClientRect();
        const [x, y] = [plot.data[trace].x[point], plot.data[trace].y[point]];
        return [box.left + layout.xaxis.l2p(x), box.top + layout.yaxis.l2p(y)];
    }""",
        [trace, point],
    )


def test_the_atlas_draws_the_apis_scores_and_an_example_opens_the_lab(page, server, api):
    page.goto(f"{server}/atlas")
    page.fill("#atlas-sentences", CORPUS)
    # The page offers the API's own default sample for the ablation effect.
    request = api.get("/openapi.json").json()["components"]["schemas"]["AtlasRequest"]
    assert page.input_value("#atlas-ablation") == str(request["properties"]["ablation_sentences"]["default"])
    page.fill("#atlas-ablation", "3")
    page.click("#atlas-run")
    wait_until(
        page, "document.querySelector('#atlas-grid .main-svg') && document.querySelector('#atlas-scatter .main-svg')"
    )
    atlas_id = page.evaluate("() => new URLSearchParams(location.search).get('id')")
    expected = api.get(f"/api/atlas/{atlas_id}").json()
    assert expected["ablation_sentences"] == 3 and "ablation on 3 sentences" in page.inner_text("#atlas-status")
    assert page.evaluate("() => document.getElementById('atlas-grid').data[0].z") == expected["scores"]["previous"]
    scatter = page.evaluate(
        "() => { const t = document.getElementById('atlas-scatter').data[0]; return [t.x, t.y, t.marker.color]; }"
    )
    flat = lambda name: [value for row in expected["scores"][name] for value in row]  # noqa: E731
    assert scatter == [flat("previous"), flat("sink"), flat("ablation")]
    screenshot(page, "atlas-page")

    # Block 0, head 2 of MiniLM: a previous-token head over the corpus.
    page.evaluate("() => document.getElementById('atlas-grid').emit('plotly_click', {points: [{x: 2, y: 0}]})")
    wait_until(page, "document.getElementById('atlas-head').dataset.head === '0,2'")
    label = expected["labels"][0][2]
    assert (
        page.inner_text(".atlas-label")
        == f"Over the corpus: {label['label']} (previous-token score {label['value']:.4f})"
    )
    example = expected["examples"][0][2][0]
    first = page.locator(".atlas-examples li a").first
    assert first.inner_text() == f"“{example['query_token']}” → “{example['key_token']}” {example['weight']:.4f}"
    # Its queries and keys in one space: the API's points, and a hover names the token in its sentence.
    wait_until(page, "document.getElementById('atlas-space')?.data?.length === 2")
    space = api.get(f"/api/atlas/{atlas_id}/layers/0/heads/2/space").json()
    drawn = page.evaluate("() => document.getElementById('atlas-space').data.map((t) => [t.x, t.y])")
    assert drawn == [[[p[0] for p in space[kind]], [p[1] for p in space[kind]]] for kind in ("query", "key")]
    title = page.evaluate("() => document.getElementById('atlas-space').layout.title.text")
    assert "PCA (scikit-learn, 2 components)" in title and "keys translated to the queries' centroid" in title
    point = 3  # the fourth token of the first sentence: "sat"
    page.locator("#atlas-space").scroll_into_view_if_needed()
    page.mouse.move(*on_screen(page, 0, point))
    wait_until(page, "document.querySelector('#atlas-space .hoverlayer .hovertext')")
    hover = page.locator("#atlas-space .hoverlayer .hovertext").first.text_content()
    assert space["token"][point] == "sat" and "query of “sat” (position 3)" in hover and "the cat [sat] on" in hover
    screenshot(page, "atlas-head", page.locator("#atlas-head"))
    page.select_option("#atlas-space-colour", "position")
    wait_until(page, "Array.isArray(document.getElementById('atlas-space').data[0].marker.color)")
    assert page.evaluate("() => document.getElementById('atlas-space').data[1].marker.color") == space["position"]
    # The same head in t-SNE: said while it projects, then the API's points, its settings in the title, and
    # a hover still names the token in its sentence.
    page.select_option("#atlas-space-method", "tsne")
    expect(page.locator("#atlas-space-status")).to_contain_text("t-SNE")
    wait_until(page, "document.getElementById('atlas-space').layout.title.text.includes('t-SNE')")
    tsne = api.get(f"/api/atlas/{atlas_id}/layers/0/heads/2/space", params={"method": "tsne"}).json()
    drawn = page.evaluate("() => document.getElementById('atlas-space').data.map((t) => [t.x, t.y])")
    assert drawn == [[[p[0] for p in tsne[kind]], [p[1] for p in tsne[kind]]] for kind in ("query", "key")]
    title = page.evaluate("() => document.getElementById('atlas-space').layout.title.text")
    assert "t-SNE (scikit-learn, perplexity 30, 500 iterations, seed 0, initialised by PCA)" in title
    assert page.inner_text("#atlas-space-status") == ""
    page.mouse.move(0, 0)
    page.mouse.move(*on_screen(page, 1, point))
    wait_until(page, "document.querySelector('#atlas-space .hoverlayer .hovertext')?.textContent.includes('key of')")
    hover = page.locator("#atlas-space .hoverlayer .hovertext").first.text_content()
    assert "key of “sat” (position 3)" in hover and "the cat [sat] on" in hover
    screenshot(page, "atlas-head-tsne", page.locator("#atlas-head"))

    first.click()
    page.wait_for_url(f"{server}/?*")
    wait_until(page, f"document.getElementById('heatmap').dataset.selectedRow === '{example['query']}'")
    assert page.input_value("#layer") == "0" and page.input_value("#head") == "2"
    assert page.input_value("#prompt") == example["text"]
    chip = page.locator('#tokens .token[aria-selected="true"]')
    assert chip.count() == 1 and example["query_token"] in chip.inner_text()
    screenshot(page, "atlas-example-in-the-lab")

    # The single-prompt labels, with the corpus's where it names another pattern (or none).
    run = open_lesson(page, server, "heads", "?token=5")
    wait_until(page, "document.querySelectorAll('#lesson-panel .head-role').length === 72")
    wait_until(page, "document.querySelector('#lesson-panel .head-role .corpus')")
    assert page.locator(f'#lesson-panel a[href="/atlas?id={atlas_id}"]').count() == 1
    stats = api.get(f"/api/runs/{run}/head-stats").json()["heads"]
    expected_notes = []
    for stat in stats:
        shares = {key: stat[key] for key in ("cls", "sep", "self", "previous", "next")}
        mine = {"cls": "sink"}.get(key := max(shares, key=shares.get), key) if stat["label"] else None
        corpus = expected["labels"][stat["layer"]][stat["head"]]
        if (corpus and corpus["score"]) == mine:
            expected_notes.append("")
        else:
            expected_notes.append(f"corpus: {corpus['score']} {corpus['value']:.2f}" if corpus else "corpus: none")
    notes = [node.get_attribute("data-corpus") for node in page.locator("#lesson-panel .head-role").all()]
    assert notes == expected_notes and 0 < sum(map(bool, notes)) < 72
    grid = page.locator("#lesson-panel .head-roles")
    grid.scroll_into_view_if_needed()
    screenshot(page, "atlas-corpus-labels", grid)

    # On a phone the atlas is one column that never scrolls sideways.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server}/atlas?id={atlas_id}")
    wait_until(page, "document.getElementById('atlas-grid')?.data")
    page.evaluate("() => document.getElementById('atlas-grid').emit('plotly_click', {points: [{x: 2, y: 0}]})")
    wait_until(page, "document.getElementById('atlas-space')?.data?.length === 2")
    screenshot(page, "atlas-phone-390")
    wide = page.evaluate(
        "() => [...document.querySelectorAll('body *')].filter((n) => n.getBoundingClientRect().right > 391)"
        ".slice(0, 8).map((n) => n.tagName + '#' + n.id + '.' + n.className)"
    )
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390, wide


def test_cancel_stops_the_corpus_run(page, server, api):
    lines = [f"Sentence {n} of a long corpus that the class will not wait for, read once." for n in range(600)]
    page.goto(f"{server}/atlas")
    page.fill("#atlas-sentences", "\n".join(lines))
    page.click("#atlas-run")
    wait_until(page, "document.getElementById('atlas-progress').value > 0")
    atlas_id = page.evaluate("() => new URLSearchParams(location.search).get('id')")
    page.click("#atlas-cancel")
    wait_until(page, "document.getElementById('atlas-status').textContent.startsWith('Cancelled')")
    deadline = time.monotonic() + 30
    while api.get(f"/api/atlas/{atlas_id}/progress").json()["state"] != "not running":
        assert time.monotonic() < deadline, api.get(f"/api/atlas/{atlas_id}/progress").json()
        time.sleep(0.05)
    assert page.locator("#atlas-run").is_enabled() and page.locator("#atlas-views").is_hidden()
