FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*
WORKDIR /lab
COPY . .
# The same install as on a developer's machine: torch==2.13.0 first, then the package, into .venv.
RUN make install
EXPOSE 8000
# Inside a container the lab must listen beyond loopback to be reachable through the published port.
CMD [".venv/bin/python", "-m", "app", "--host", "0.0.0.0", "--port", "8000"]
