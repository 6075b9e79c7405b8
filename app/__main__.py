"""`python -m app`: check the settings, load the model (and the cross-encoder, where one is set) and open the
run store (or exit with one line saying why), then serve the lab with its HTTP limits (app.serving.server)."""

import argparse
import os
import sys

from app.settings import ENV_PREFIX, Settings, SettingsError, get_settings


def settings_or_exit() -> Settings:
    try:
        return get_settings()
    except SettingsError as error:
        sys.exit(f"attention-lab: {error}")


def main() -> None:
    settings = settings_or_exit()
    parser = argparse.ArgumentParser(prog="attention-lab", description=__doc__)
    parser.add_argument("--host", default=settings.host, help="127.0.0.1 by default; 0.0.0.0 opens it to the network")
    parser.add_argument("--port", type=int, default=settings.port)
    parser.add_argument(
        "--workers", type=int, default=settings.workers, help="server processes; each holds its own model copy"
    )
    args = parser.parse_args()
    # The workers read their count from the settings (each one's share of the reserve, class mode's store).
    os.environ[f"{ENV_PREFIX}WORKERS"] = str(args.workers)
    get_settings.cache_clear()
    serve(settings_or_exit(), args.host, args.port, args.workers)


def serve(settings: Settings, host: str, port: int, workers: int) -> None:
    # Imported once the settings are known good: transformers, the lab and its web stack take seconds to load,
    # and a bad setting is said before that.
    import uvicorn

    from app.engine.model import ModelLoadError, load_model
    from app.engine.rerank import load_cross_encoder
    from app.engine.threads import one_core_elsewhere
    from app.main import create_app
    from app.serving.memory import check_memory, keep_freed_memory
    from app.serving.server import connections, server_options
    from app.serving.spec_store import StoreError, open_spec_store

    try:
        check_memory(settings)
    except SettingsError as error:
        sys.exit(f"attention-lab: {error}")
    connections(settings)  # the open-file limit raised (or the bound lowered, saying so) before serving
    # Before the model loads, as the lifespan does when it loads the model itself: this thread, which goes on
    # to serve, then keeps no OpenMP team that would outnumber the cores with the passes' own.
    keep_freed_memory()
    one_core_elsewhere()
    try:
        specs = open_spec_store(settings)
        model = load_model(settings.model_path, placement=settings.placement)
        cross_encoder = load_cross_encoder(settings.cross_encoder) if settings.cross_encoder else None
    except (ModelLoadError, StoreError) as error:
        sys.exit(f"attention-lab: {error}")
    if workers == 1:
        uvicorn.run(create_app(model, specs, cross_encoder), host=host, port=port, **server_options(settings))
        return
    # Each worker loads its own models and opens its own store: these only made a bad setting fail here, in
    # one line and with an exit status (uvicorn's supervisor exits 0 when a worker fails to start).
    del model, cross_encoder
    specs.close()
    uvicorn.run("app.main:app", host=host, port=port, workers=workers, **server_options(settings))


if __name__ == "__main__":
    main()
