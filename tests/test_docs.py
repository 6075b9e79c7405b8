"""/docs: Swagger UI served by the lab itself, under the lab's Content-Security-Policy; and the docs in the
repository name every route the lab serves, and only those."""

import re
from pathlib import Path

from app.main import create_app


def test_the_docs_page_loads_only_the_labs_own_files(client):
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self';" in page.headers["content-security-policy"]
    scripts = re.findall(r"<script\b[^>]*>", page.text)
    assert scripts and all(re.search(r'\bsrc="', tag) for tag in scripts)  # no inline script
    assert re.findall(r"<script\b[^>]*>([^<]*)</script>", page.text) == [""] * len(scripts)
    files = re.findall(r'(?:src|href)="([^"]*)"', page.text)
    assert set(files) == {
        "/docs/assets/swagger-ui.css",
        "/docs/assets/favicon.png",
        "/docs/assets/swagger-ui-bundle.js",
        "/docs/start.js",
    }
    for url in files:
        response = client.get(url)
        assert response.status_code == 200 and len(response.content) > 0, url
    start = client.get("/docs/start.js")
    assert start.headers["content-type"].startswith("text/javascript")
    assert '"/openapi.json"' in start.text and "validatorUrl: null" in start.text
    schema = client.get("/openapi.json").json()
    assert "/api/analyze" in schema["paths"] and "/docs" not in schema["paths"]


ROOT = Path(__file__).resolve().parents[1]
DOCS = " ".join(path.read_text() for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def route_pattern(path: str) -> re.Pattern:
    """A route's path with each {parameter} matching one segment: a number, a $VARIABLE, or {a name}."""
    return re.compile(
        "".join("[^/]+" if part.startswith("{") else re.escape(part) for part in re.split(r"({[^}]*})", path))
    )


def test_the_docs_name_every_route_and_only_routes():
    routes = [path for path in create_app().openapi()["paths"] if path.startswith("/api/")]
    named = re.findall(r"`(?:GET|POST|PUT|DELETE) (/api/[^`?\s]*)", DOCS)
    called = re.findall(r"localhost:8000(/api/[^\s\"'?]*)", DOCS)
    assert named and called
    unknown = [path for path in named + called if not any(route_pattern(route).fullmatch(path) for route in routes)]
    assert not unknown, f"the docs name paths the lab does not serve: {unknown}"
    # the class endpoints are listed under their prefix, in docs/api.md's "Class endpoints"
    missing = [
        route
        for route in routes
        if not route.startswith("/api/classes")
        and not any(route_pattern(route).fullmatch(path) for path in named + called)
    ]
    assert not missing, f"no doc says what these answer: {missing}"
