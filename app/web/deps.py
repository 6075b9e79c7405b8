"""Dependencies shared by the routers. They are async because they only read: FastAPI runs a plain
`def` dependency in its thread pool, a thread hop for each request (about 0.3 ms each, measured in process)."""

from typing import Annotated

from fastapi import Depends, Request

from app.serving.gate import Client
from app.serving.lab import Lab


async def get_lab(request: Request) -> Lab:
    return request.app.state.lab


async def get_client(request: Request) -> Client:
    """Whose turn at the model a request takes: its address (the one a trusted proxy forwards), and within
    that its browser, as its signed cookie names it (app.web.middleware.ClientCookie)."""
    address = request.client.host if request.client else ""
    return Client(address, request.scope.get("lab_client", ""))


LabDep = Annotated[Lab, Depends(get_lab)]
ClientDep = Annotated[Client, Depends(get_client)]
