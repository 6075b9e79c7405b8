"""/docs: Swagger UI served by the lab itself, under the lab's Content-Security-Policy."""

import re


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
