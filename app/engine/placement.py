"""Where a model's numbers live: the dtype its weights and passes are in, and the device they run on.

Chosen for every model by ATTENTION_LAB_DTYPE and ATTENTION_LAB_DEVICE, and for one model by its reference:
`folder?dtype=bfloat16&device=cuda:1` (a query after the folder or Hub id, as in a URL: a Hub id's `@revision`
and a device's `cuda:1` keep their own characters). `auto` is decided at load (resolve): on a GPU, the dtype
the checkpoint was saved in; on the CPU, float32 unless its weights in float32 would not fit the memory
budget, then bfloat16."""

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_CHOICES = ("auto", *DTYPES)
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


def resolved_device(choice: str) -> torch.device:
    """The device a choice names; auto: the first CUDA device if there is one, else the CPU."""
    if choice == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(choice)
    return torch.device("cuda:0") if device.type == "cuda" and device.index is None else device


def saved_dtype(config) -> torch.dtype:
    """The dtype a checkpoint's config says its weights were saved in (`dtype`, which transformers 5 also
    reads an older config's `torch_dtype` into); float32 where it says none the lab runs in."""
    saved = getattr(config, "dtype", None)
    if isinstance(saved, str):
        saved = DTYPES.get(saved)
    return saved if saved in DTYPES.values() else torch.float32


def device_budget(device: torch.device, placement: Placement) -> int | None:
    """The bytes a model's weights may take where they run: on a GPU its free memory now, on the CPU the
    placement's host budget; None where there is nothing to read (mps)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        return placement.host_budget_bytes
    return None


DEVICE_HEADROOM = 8  # of a GPU's free memory, 1/DEVICE_HEADROOM is left to the allocator's cache and fragments


def work_bytes(device: torch.device, chosen: int) -> int | None:
    """The memory a device has for the work of its passes, apart from the host's (app.serving.memory.Budget):
    `chosen` bytes (ATTENTION_LAB_MAX_DEVICE_BYTES), or 0 for a GPU's free memory now (its models loaded) less
    1/DEVICE_HEADROOM. None on the CPU, whose memory is the host's, and on mps, whose memory it shares."""
    if device.type != "cuda":
        return None
    return chosen or torch.cuda.mem_get_info(device)[0] * (DEVICE_HEADROOM - 1) // DEVICE_HEADROOM


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
