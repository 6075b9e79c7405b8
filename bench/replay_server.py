"""A bare app that answers from memory with answers recorded from the lab, byte for byte: what moving
the lab's answers over HTTP costs when the server does no work at all (bench/floor.py).

The same stack as the lab (FastAPI on uvicorn with httptools); run it as
`uvicorn replay_server:app --app-dir bench --http httptools --no-access-log`.
"""

import json

from fastapi import FastAPI, Request, Response

app = FastAPI()
ANSWERS: dict[tuple[str, int], tuple[bytes, dict[str, str]]] = {}


@app.put("/answers/{kind}/{n}")
async def keep(kind: str, n: int, request: Request) -> Response:
    """The body as the lab sent it (compressed as it was), and the headers that say how to read it."""
    ANSWERS[kind, n] = (await request.body(), json.loads(request.headers["X-Replay-Headers"]))
    return Response(status_code=204)


@app.post("/analyze/{n}")
async def analyze(n: int, request: Request) -> Response:
    await request.body()  # read, as the lab reads its request
    return replay("analyze", n)


@app.get("/attention/{n}")
async def attention(n: int) -> Response:
    return replay("attention", n)


def replay(kind: str, n: int) -> Response:
    body, headers = ANSWERS[kind, n]
    return Response(body, headers=headers)
