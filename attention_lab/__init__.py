"""Attention Lab in a notebook: `from attention_lab import show` (and `grow`, to grow a model here).

A name of its own, so that a notebook whose folder holds an app.py (or an app/) of its own still finds the lab:
the kernel puts that folder first on sys.path, where `import app` would find the notebook's app, not the lab's.
The implementation is the lab's package `app`, installed beside this one (by the distribution attention-lab);
it is loaded from there by its path, whatever sys.path finds first."""

import importlib.util
import sys
from pathlib import Path

IMPLEMENTATION = Path(__file__).resolve().parent.parent / "app"


def _load_implementation() -> None:
    loaded = sys.modules.get("app")
    if loaded is not None:
        if Path(loaded.__file__ or "").resolve().parent != IMPLEMENTATION:
            raise ImportError(
                f"attention_lab runs the lab's package `app` ({IMPLEMENTATION}), but this kernel has imported "
                f"another module named app ({loaded.__file__}): import attention_lab first, or restart the kernel"
            )
        return
    spec = importlib.util.spec_from_file_location(
        "app", IMPLEMENTATION / "__init__.py", submodule_search_locations=[str(IMPLEMENTATION)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["app"] = module
    spec.loader.exec_module(module)


_load_implementation()

from app.notebook import LabWidget, show  # noqa: E402  (the lab's `app`, loaded above)
from app.notebook.grow import Grown, grow  # noqa: E402

__all__ = ["Grown", "LabWidget", "grow", "show"]
