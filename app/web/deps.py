"""Dependencies shared by the routers. They are async because they only read: FastAPI runs a plain
`def` dependency in its thread pool, a thread hop for each request (bench/README.md)."""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Annotated

from fastapi import Depends, Request

from app.serving.atlas import Atlases
from app.serving.experiments import Experiments
from app.serving.gate import Client
from app.serving.lab import Lab
from app.serving.memory import HOLDS
from app.serving.search import Searches
from app.serving.spec_store import CorpusAllowance
from app.serving.writing import Writings


async def get_lab(request: Request) -> Lab:
    return request.app.state.lab


async def get_client(request: Request) -> Client:
    """Whose turn at the model a request takes: its address (the one a trusted proxy forwards), and within
    that its browser, as its signed cookie names it (app.web.middleware.ClientCookie)."""
    address = request.client.host if request.client else ""
    return Client(address, request.scope.get("lab_client", ""))


async def get_searches(request: Request) -> Searches:
    return request.app.state.searches


async def get_atlases(request: Request) -> Atlases:
    return request.app.state.atlases


async def get_experiments(request: Request) -> Experiments:
    return request.app.state.experiments


async def get_writings(request: Request) -> Writings:
    return request.app.state.writings


async def get_corpora(request: Request) -> CorpusAllowance:
    return request.app.state.corpora


LabDep = Annotated[Lab, Depends(get_lab)]
SearchesDep = Annotated[Searches, Depends(get_searches)]
AtlasesDep = Annotated[Atlases, Depends(get_atlases)]
ExperimentsDep = Annotated[Experiments, Depends(get_experiments)]
WritingsDep = Annotated[Writings, Depends(get_writings)]
CorporaDep = Annotated[CorpusAllowance, Depends(get_corpora)]
ClientDep = Annotated[Client, Depends(get_client)]


async def request_reads() -> AsyncIterator[None]:
    """The runs a request reads are held in the lab's memory budget until it has answered (Budget.hold):
    a run the cache lets go meanwhile is still in memory for it."""
    async with AsyncExitStack() as holds:
        HOLDS.set(holds)
        yield
