"""The engine knows nothing of HTTP: importing all of it loads neither FastAPI nor Starlette."""

import pkgutil
import subprocess
import sys

import app.engine


def test_the_engine_imports_no_web_framework():
    modules = [info.name for info in pkgutil.walk_packages(app.engine.__path__, prefix="app.engine.")]
    script = (
        f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn')))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert len(modules) > 8 and loaded.strip() == "[]"
