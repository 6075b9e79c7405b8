"""Attention Lab: a real transformer run once with hooks, every intermediate shown with its numbers."""

import os

# Set before transformers is first imported, so nothing in this process ever reaches a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# How long torch's OpenMP workers spin waiting for the next operation before they sleep; libgomp reads it
# once, when torch loads it. Its default (300,000) keeps the model thread's second worker spinning while
# the event loop needs that core, and a pass then stalls whenever one of its threads is preempted; 10,000
# serves a learner beside a flood better and is as fast or faster alone (bench/README.md, "Figures behind the
# code"). See app.engine.threads.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")
