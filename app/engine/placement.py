"""Where a model's numbers live, as torch names them: the dtype a choice (app.engine.choices) resolves to, the
device it runs on, and the memory that device has for its weights and passes."""

import torch

from app.engine.choices import DTYPE_NAMES, Placement

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


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
