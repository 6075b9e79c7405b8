"""Attention Lab: a real transformer run once with hooks, every intermediate shown with its numbers."""

import os

# Set before transformers is first imported, so nothing in this process ever reaches a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# How long torch's OpenMP workers spin waiting for the next operation before they sleep; libgomp reads it
# once, when torch loads it. Its default (300,000) keeps the model thread's second worker spinning while
# the event loop needs that core, and a pass then stalls whenever one of its threads is preempted: beside
# a 40-connection flood a learner's analyze took 0.9-3.3 s against 1.1-1.7 s with 10,000, which is also
# as fast or faster alone (servers alternating, analyze + attention: 8 tokens 25.8 -> 22.5 ms, 128 tokens
# 65.8 -> 56.3 ms, 512 tokens 344 -> 332 ms). See app.engine.threads.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")
