"""Dependencies shared by the routers."""

from typing import Annotated

from fastapi import Depends, Request

from app.lab import Lab


def get_lab(request: Request) -> Lab:
    return request.app.state.lab


LabDep = Annotated[Lab, Depends(get_lab)]
