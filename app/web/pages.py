"""The lab page and its assets, all served by the app itself: the page works with no internet.

Assets are named by what they are: the page asks for /assets/<hash of the static folder>/… and for
plotly.js under its version, so a browser (or a school's caching proxy) keeps them for a year and never
asks again, and a new version of the lab is a new name. /static/… stays, answered with validators.
"""

import hashlib
import posixpath
import re
from dataclasses import asdict
from pathlib import Path
from typing import get_args

import plotly
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.datastructures import Headers
from starlette.responses import Response

from app.engine import atlas
from app.engine.measures import MEASURES, Measure
from app.engine.spec import AtlasSpec
from app.web.deps import AtlasesDep, LabDep
from app.web.precompressed import CompressedFiles

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TEXT = "The animal didn't cross the street because it was too tired"
# plotly.js ships inside the plotly wheel; serve that file rather than keep a copy in git.
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
PLOTLY_URL = f"/vendor/plotly-{plotly.__version__}.min.js"
IMMUTABLE = "public, max-age=31536000, immutable"


def static_version(folder: Path) -> str:
    """A short hash of every file under the folder, names and contents: the assets' version."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


ASSETS_URL = f"/assets/{static_version(ROOT / 'static')}"


def module_graph(folder: Path, entry: str) -> list[str]:
    """Every module the entry imports, directly or not, relative to the folder: the page names them all
    at once (modulepreload) instead of the browser finding them one import at a time."""
    found, waiting = [], [entry]
    while waiting:
        module = waiting.pop()
        if module in found:
            continue
        found.append(module)
        waiting.extend(imports(folder, module))
    return found


def imports(folder: Path, module: str) -> list[str]:
    """The modules one module imports (its static relative imports), relative to the folder."""
    source = (folder / module).read_text()
    targets = re.findall(r'^import [^;]*? from "(\.{1,2}/[^"]+)";', source, flags=re.MULTILINE | re.DOTALL)
    return [posixpath.normpath(posixpath.join(posixpath.dirname(module), target)) for target in targets]


FIRST_SCREEN_MODULES = module_graph(ROOT / "static" / "js", "main.js")
# The stylesheet goes inside the page: the first paint waits for no second request (6 kB compressed).
STYLESHEET = (ROOT / "static" / "lab.css").read_text()


COMPRESSED = CompressedFiles()


class CompressedStaticFiles(StaticFiles):
    """Static files, compressed once each for every browser that accepts it (app.web.precompressed)."""

    async def get_response(self, path: str, scope) -> Response:
        return await COMPRESSED.respond(await super().get_response(path, scope), Headers(scope=scope))


class ImmutableFiles(CompressedStaticFiles):
    """Static files under a content-hashed URL: cached for a year, never revalidated."""

    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = IMMUTABLE
        return response


class RevalidatedFiles(CompressedStaticFiles):
    """Static files under a fixed URL: kept, but checked with their ETag before each use."""

    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        return response


router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=ROOT / "templates")


@router.get("/", response_class=HTMLResponse)
async def index(request: Request, lab: LabDep, model: str | None = None):
    """The lab for one model: the default, or ?model= one the lab serves (an unknown name: the default)."""
    info = lab.models.info(model if model in lab.models.names else None)  # a page view loads no model
    max_chars = lab.models.limits[0]
    config = {
        "model": info,
        "defaultModel": lab.models.default,
        "defaultText": DEFAULT_TEXT,
        "maxChars": max_chars,
        "plotly": PLOTLY_URL,
        **measures_config(),
    }
    first_token = info["pair_layout"].split()[0]
    return templates.TemplateResponse(
        request,
        "index.html",
        {
            "model": info,
            "models": lab.models.names,
            "config": config,
            "default_text": DEFAULT_TEXT,
            "max_chars": max_chars,
            "assets": ASSETS_URL,
            "modules": FIRST_SCREEN_MODULES,
            "stylesheet": STYLESHEET,
            "pair_layout": info["pair_layout"],
            "pooling_names": {
                "mean": "mean",
                "max": "max",
                "last": "last token",
                "mean_sqrt_len": "sum ÷ √N",
                "weighted_mean": "position-weighted mean",
                "cls": first_token if first_token != "A" else "first token",
            },
        },
        headers={"Cache-Control": "no-cache"},
    )


def measures_config() -> dict:
    """The measures as the views read them (static/js/measures.js), in the page's config and a widget's."""
    return {
        "measures": {key: asdict(measure) for key, measure in MEASURES.items()},
        "viewMeasures": list(get_args(Measure)),  # what the Measure control offers; "difference" is a lesson's
    }


@router.get("/atlas", response_class=HTMLResponse)
async def atlas_page(request: Request, lab: LabDep, atlases: AtlasesDep):
    """The head atlas of the default model: a corpus run's scores per head, its top examples."""
    info = lab.models.info(None)
    return templates.TemplateResponse(
        request,
        "atlas.html",
        {
            "model": info,
            "config": {"model": info, "plotly": PLOTLY_URL, "scores": atlas.SCORES, "labelled": list(atlas.LABELS)},
            "assets": ASSETS_URL,
            "stylesheet": STYLESHEET,
            "max_sentences": atlas.MAX_SENTENCES,
            "max_tokens": atlas.MAX_TOKENS,
            "shipped": len(atlas.shipped_sentences()),
            "ablation_sentences": AtlasSpec.ablation_sentences,
            "max_ablation_tokens": atlases.max_ablation_tokens,
        },
        headers={"Cache-Control": "no-cache"},
    )


@router.get(PLOTLY_URL)
async def plotly_js(request: Request):
    response = FileResponse(
        PLOTLY_JS, media_type="text/javascript", headers={"Cache-Control": IMMUTABLE}, stat_result=PLOTLY_JS.stat()
    )
    return await COMPRESSED.respond(response, request.headers)
