"""The numbers: model families, the forward pass with its hooks, a run, what the lessons measure.
Knows nothing of HTTP."""
