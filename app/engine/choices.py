"""A model's placement as chosen: the dtype its weights and passes are in, and the device they run on. Read
with the settings, before torch loads (app.engine.placement resolves a choice to torch's dtypes and devices).

Chosen for every model by ATTENTION_LAB_DTYPE and ATTENTION_LAB_DEVICE, and for one model by its reference:
`folder?dtype=bfloat16&device=cuda:1` (a query after the folder or Hub id, as in a URL: a Hub id's `@revision`
and a device's `cuda:1` keep their own characters). `auto` is decided at load (resolve): on a GPU, the dtype
the checkpoint was saved in; on the CPU, float32 unless its weights in float32 would not fit the memory
budget, then bfloat16."""

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

DTYPE_NAMES = ("float32", "bfloat16", "float16")
DTYPE_CHOICES = ("auto", *DTYPE_NAMES)
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?|mps")
CHOICE_KEYS = ("dtype", "device")


class PlacementError(ValueError):
    """A dtype or device the lab cannot run a model in."""


def checked_dtype(value: str) -> str:
    if value not in DTYPE_CHOICES:
        raise PlacementError(f"dtype {value!r}: valid: {', '.join(DTYPE_CHOICES)}")
    return value


def checked_device(value: str) -> str:
    if not DEVICE_PATTERN.fullmatch(value):
        raise PlacementError(f"device {value!r}: valid: auto, cpu, cuda, cuda:N, mps")
    return value


@dataclass(frozen=True)
class Placement:
    """What a model is loaded as: its dtype and device (each "auto" or a choice), and the bytes its weights
    may take on the host (None: no bound; a GPU's bound is its free memory, read at load)."""

    dtype: str = "auto"
    device: str = "auto"
    host_budget_bytes: int | None = None

    def __post_init__(self):
        checked_dtype(self.dtype)
        checked_device(self.device)


def split_choice(reference: str) -> tuple[str, dict[str, str]]:
    """A model reference and the dtype and device it names for itself: `org/name?dtype=bfloat16` is
    ("org/name", {"dtype": "bfloat16"}). A reference without a query names none."""
    reference, _, query = reference.partition("?")
    try:
        choices = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    except ValueError:
        raise PlacementError(f"{reference}: {query!r} is not dtype=…&device=…") from None
    unknown = sorted(set(choices) - set(CHOICE_KEYS))
    if unknown:
        raise PlacementError(f"{reference}: no choice {unknown[0]!r} (a model may choose its dtype and device)")
    if "dtype" in choices:
        checked_dtype(choices["dtype"])
    if "device" in choices:
        checked_device(choices["device"])
    return reference, choices
