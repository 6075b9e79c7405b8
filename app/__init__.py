"""Attention Lab: a real transformer run once with hooks, every intermediate shown with its numbers."""

import os

# Set before transformers is first imported, so nothing in this process ever reaches a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
