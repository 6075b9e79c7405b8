"""The lab page and its assets, all served by the app itself: the page works with no internet."""

from pathlib import Path

import plotly
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates

from app.deps import LabDep

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TEXT = "The animal didn't cross the street because it was too tired"
# plotly.js ships inside the plotly wheel; serve that file rather than keep a copy in git.
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=ROOT / "templates")


@router.get("/", response_class=HTMLResponse)
def index(request: Request, lab: LabDep):
    info = lab.info
    config = {"model": info, "defaultText": DEFAULT_TEXT, "maxChars": lab.max_chars}
    return templates.TemplateResponse(
        request,
        "index.html",
        {"model": info, "config": config, "default_text": DEFAULT_TEXT, "max_chars": lab.max_chars},
    )


@router.get("/vendor/plotly.min.js")
def plotly_js():
    return FileResponse(PLOTLY_JS, media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"})
