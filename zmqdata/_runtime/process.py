"""This process's identity, so consumers can tell in-process workers apart.

>>> PROCESS_TOKEN.startswith(f"{os.getpid()}-")
True
"""

from __future__ import annotations

import os
import uuid

PROCESS_TOKEN = f"{os.getpid()}-{uuid.uuid4().hex}"
"""Sent by workers when they register and by consumers when they read."""
