FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*
WORKDIR /lab
COPY . .
# The same install as on a developer's machine: torch==2.13.0 first, then the package, into .venv.
RUN make install
# Server processes, each with its own model copy (about 0.5 GB plus its run cache). They share runs through
# the spec store: SQLite in /lab/data by default (keep it on a volume to keep runs across restarts), or
# the Redis that ATTENTION_LAB_STORE names when several containers serve one class (see compose.yaml).
ENV ATTENTION_LAB_WORKERS=2 \
    ATTENTION_LAB_DATA_DIR=/lab/data
VOLUME /lab/data
EXPOSE 8000
# Inside a container the lab must listen beyond loopback to be reachable through the published port.
CMD [".venv/bin/python", "-m", "app", "--host", "0.0.0.0", "--port", "8000"]
