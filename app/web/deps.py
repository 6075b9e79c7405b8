"""Dependencies shared by the routers. They are async because they only read: FastAPI runs a plain
`def` dependency in its thread pool, a thread hop for each request (about 0.3 ms each, measured in process)."""

import re
from typing import Annotated

from fastapi import Depends, Request

from app.serving.gate import Client
from app.serving.lab import Lab
from app.web.middleware import CLIENT_COOKIE

COOKIE_VALUE = re.compile(r"[A-Za-z0-9_-]{8,64}")


async def get_lab(request: Request) -> Lab:
    return request.app.state.lab


async def get_client(request: Request) -> Client:
    """Whose turn at the model a request takes: its address, and its browser's cookie within that."""
    cookie = request.cookies.get(CLIENT_COOKIE, "")
    address = request.client.host if request.client else ""
    return Client(address, cookie if COOKIE_VALUE.fullmatch(cookie) else "")


LabDep = Annotated[Lab, Depends(get_lab)]
ClientDep = Annotated[Client, Depends(get_client)]
