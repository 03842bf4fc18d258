"""Package and wire-protocol versions."""

__version__ = "0.1.0"
PROTOCOL_VERSION = 2
"""2: numbered split requests, idempotency keys, read tickets (v1 peers are refused)."""
