"""Serving runs to many clients: the lab (kept runs, one pass per run), the gate, the spec store, memory."""
