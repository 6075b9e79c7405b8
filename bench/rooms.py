"""How many rooms (the app's modules) one search request and one atlas request pass through, and how often they
cross from one into another: every call from a function of one app module into a function of another, and from
one folder (app/web, app/serving, app/engine) into another, counted with a profiler hook on every thread while
the request is answered in process. The class's background tasks, which run on the same event loop, are left
out. Run from a checkout: `.venv/bin/python bench/rooms.py`."""

import asyncio
import os
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's app, whichever the venv installed
os.environ.setdefault("ATTENTION_LAB_DATA_DIR", tempfile.mkdtemp(prefix="rooms-"))
os.environ["ATTENTION_LAB_RESERVE_BYTES"] = "0"

from app.main import create_app  # noqa: E402

APP = str(ROOT / "app") + os.sep


def room(frame) -> str | None:
    name = frame.f_code.co_filename
    if not name.startswith(APP):
        return None
    name = name[len(str(ROOT)) + 1 :]
    return None if name.startswith("app/classroom/") else name


class Crossings:
    def __init__(self):
        self.rooms: set[str] = set()
        self.calls: Counter[tuple[str, str]] = Counter()

    def __call__(self, frame, event, arg) -> None:
        if event != "call" or (here := room(frame)) is None:
            return
        self.rooms.add(here)
        there = room(frame.f_back) if frame.f_back is not None else None
        if there is not None and there != here:
            self.calls[(there, here)] += 1

    def folders(self) -> int:
        return sum(n for (a, b), n in self.calls.items() if a.rsplit("/", 1)[0] != b.rsplit("/", 1)[0])


async def traced(request) -> Crossings:
    crossings = Crossings()
    threading.setprofile(crossings)
    sys.setprofile(crossings)
    try:
        response = await request()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    response.raise_for_status()
    return crossings


async def main() -> None:
    app = create_app()
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://lab", timeout=None) as client:
            corpus = "\n".join(f"document {n} about a bank" for n in range(40))
            index = (await client.post("/api/search/index", json={"documents": corpus})).json()["index_id"]
            await client.get(f"/api/search/index/{index}")
            ask = {"index_id": index, "k": 5, "prefix": "", "hnsw": {"m": 16, "ef_construction": 128, "ef": 64}}
            await client.post("/api/search", json={**ask, "query": "a river bank"})  # the graph built
            sentences = {"sentences": "The cat sat.\nRain fell on the hills.", "ablation_sentences": 0}
            atlas = (await client.post("/api/atlas", json=sentences)).json()["atlas_id"]
            found = {
                "search": await traced(lambda: client.post("/api/search", json={**ask, "query": "money in the bank"})),
                "atlas": await traced(lambda: client.get(f"/api/atlas/{atlas}")),
            }
    for name, crossings in found.items():
        print(
            f"{name}: {len(crossings.rooms)} modules, {sum(crossings.calls.values())} calls from one into another "
            f"({len(crossings.calls)} distinct), {crossings.folders()} from one folder into another"
        )


if __name__ == "__main__":
    asyncio.run(main())
