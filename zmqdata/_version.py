"""Package and wire-protocol versions."""

__version__ = "0.1.0"
PROTOCOL_VERSION = 5
"""5: multi-rank (dealt) reads: split ordinals and counts, token requests, seeds.
4: exactly once: split ranges, lineage, acknowledgements, task epochs, resume.
3: split requests ask for several splits at once (``max_splits``).
2: numbered split requests, idempotency keys, read tickets.
Peers of another version are refused with a message naming both versions."""
