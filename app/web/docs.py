"""/docs: Swagger UI for the lab's API with no internet. Its scripts and styles come from the installed
fastapi-offline package; the page's own start-up is a script file, since the lab's Content-Security-Policy
(rightly) refuses inline script, which FastAPI's own docs page uses."""

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

SWAGGER_UI = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs/assets"

PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Attention Lab API</title>
<link rel="stylesheet" href="{ASSETS_URL}/swagger-ui.css">
<link rel="icon" href="{ASSETS_URL}/favicon.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{ASSETS_URL}/swagger-ui-bundle.js"></script>
<script src="/docs/start.js"></script>
</body>
</html>
"""

# FastAPI's own settings for Swagger UI, less the validator badge (it asks a server outside the lab).
START = """window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,
});
"""

router = APIRouter(include_in_schema=False)


@router.get("/docs", response_class=HTMLResponse)
def docs_page():
    return HTMLResponse(PAGE)


@router.get("/docs/start.js")
def docs_start():
    return Response(START, media_type="text/javascript")
