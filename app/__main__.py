"""`python -m app`: load the model (or exit with one line saying why), then serve the lab."""

import argparse
import sys

import uvicorn

from app.main import create_app
from app.model import ModelLoadError, load_model
from app.settings import get_settings


def main() -> None:
    settings = get_settings()
    parser = argparse.ArgumentParser(prog="attention-lab", description=__doc__)
    parser.add_argument("--host", default=settings.host, help="127.0.0.1 by default; 0.0.0.0 opens it to the network")
    parser.add_argument("--port", type=int, default=settings.port)
    args = parser.parse_args()
    try:
        model = load_model(settings.model_path)
    except ModelLoadError as error:
        sys.exit(f"attention-lab: {error}")
    uvicorn.run(create_app(model), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
