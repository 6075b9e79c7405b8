"""Models named as the Hugging Face Hub names them, `org/name` or `org/name@revision`, found in the local
Hugging Face cache where `hf download` left them: models--org--name/refs/<revision> holds a commit, and
snapshots/<commit>/ the model's files (links into blobs/). Nothing is downloaded: no network is asked."""

import os
import re
from pathlib import Path

# A revision is a branch or tag (refs/<revision>) or a commit hash (snapshots/<hash>).
HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w][\w./-]*))?")


class NotInCache(LookupError):
    """The model is not in the local Hugging Face cache: one line with the command that puts it there."""


def is_hub_id(reference: str) -> bool:
    return HUB_ID.fullmatch(reference) is not None


def hub_cache() -> Path:
    """The cache huggingface_hub writes to: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub
    (XDG_CACHE_HOME in place of ~/.cache where it is set)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def snapshot(reference: str) -> Path:
    """The folder of the cached snapshot a Hub id names: the commit its ref (main by default) points to, or
    the commit the revision is."""
    found = HUB_ID.fullmatch(reference)
    repo, revision = found["repo"], found["revision"]
    cache = hub_cache()
    model = cache / f"models--{repo.replace('/', '--')}"
    ref = model / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else revision
    folder = model / "snapshots" / commit if commit else None
    if folder is None or not (folder / "config.json").exists():
        download = f"hf download {repo}" + (f" --revision {revision}" if revision else "")
        raise NotInCache(
            f"model {reference} is not in the Hugging Face cache ({cache}); the lab never downloads: "
            f"run `{download}` once, then start the lab again"
        )
    return folder
