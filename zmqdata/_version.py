"""Package and wire-protocol versions."""

__version__ = "0.2.0"
PROTOCOL_VERSION = 6
OLDEST_PROTOCOL_VERSION = 5
"""6: per-output keys of 1-to-many ops, traces, saves, pipelines held, quiet
heartbeats (paces, unchanged iteration states, stats as deltas, split requests
as signs of life, split periods), task read modes; peers of v5 are still accepted.
5: multi-rank (dealt) reads: split ordinals and counts, token requests, seeds.
4: exactly once: split ranges, lineage, acknowledgements, task epochs, resume.
3: split requests ask for several splits at once (``max_splits``).
2: numbered split requests, idempotency keys, read tickets.
Peers older than ``OLDEST_PROTOCOL_VERSION`` (or newer than this one) are
refused with a message naming both versions."""
