"""A process that has imported what `python -m app` imports, and forks `python -m app` from there on request.

A lab's start is mostly its imports (torch, transformers and the lab: about ten seconds of one core), and the
suite starts dozens of labs. A forked lab runs the same `app.__main__` with its own arguments and environment and
then loads its model, opens its store and serves exactly as a fresh one does; it only skips the imports. Nothing
has run a torch operation here, so no OpenMP team exists to be lost in the fork.

tests/conftest.py's LabProcess forks here when the environment differs from the suite's only in the lab's own
settings (ATTENTION_LAB_*, read at start, not at import); a lab whose memory is measured as a fresh process's,
or that needs another environment or command, is started fresh.

Run as `python -m tests.zygote SOCKET`: each connection sends one JSON line {args, env, cwd, log} and is answered
with the forked lab's pid. When a lab ends, its exit status (as Popen's returncode) is written beside its log."""

import gc
import json
import os
import random
import runpy
import signal
import socket
import sys
import traceback
import warnings
from pathlib import Path

import numpy
import uvicorn  # noqa: F401

import app.__main__  # noqa: F401  (sets the lab's own environment, as `python -m app` does first)
import app.main  # noqa: F401  (the web stack, the engine, torch and transformers)


def exit_path(log: Path) -> Path:
    return log.with_name(log.name + ".exit")


def returncode(status: int) -> int:
    """As subprocess.Popen says it: the exit code, or minus the signal that ended the process."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def serve_forks(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    listener.settimeout(0.2)
    logs: dict[int, Path] = {}
    suite = os.getppid()
    print("ready", flush=True)
    while os.getppid() == suite:  # a suite that was killed leaves no zygote behind
        reap(logs)
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        with connection:
            request = json.loads(connection.makefile().readline())
            pid = os.fork()
            if pid == 0:
                listener.close()
                run_lab(request)  # never returns: the child exits as `python -m app` would
            logs[pid] = Path(request["log"])
            connection.sendall(f"{pid}\n".encode())


def reap(logs: dict[int, Path]) -> None:
    while logs:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        exit_path(logs.pop(pid)).write_text(str(returncode(status)))


def run_lab(request: dict) -> None:
    with open(request["log"], "ab", buffering=0) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["-m", *request["args"]]  # run_module puts app/__main__.py first, as `python -m app` does
    # A fresh process draws its seeds from the system; a fork would repeat the zygote's.
    random.seed()
    numpy.random.seed()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # runpy warns that app.__main__ was imported before it runs as __main__: here, on purpose (above).
    warnings.filterwarnings("ignore", "'app.__main__' found in sys.modules", RuntimeWarning)
    try:
        runpy.run_module("app", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit:
        code = exit.code
    except BaseException:
        traceback.print_exc()
        code = 1
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.exit(code or 0)


if __name__ == "__main__":
    # What the imports made, frozen before any fork: a lab's cycle collections (its start's, and the one at its
    # interpreter's end) then never walk them, which made each forked lab copy the zygote's pages it shares:
    # 1.4 s of a core for each `python -m app` that stops at a bad setting, 0.3 s with them frozen.
    gc.freeze()
    serve_forks(sys.argv[1])
