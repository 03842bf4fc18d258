"""The service benchmarks: an alias of ``python bench/run.py`` (same flags).

Kept because docs/performance.md names it: ``python bench/service.py --quick``.
``cluster`` (dispatcher in-process, workers as processes) lives in bench/common.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import cluster
from bench.run import main

__all__ = ["cluster", "main"]

if __name__ == "__main__":
    sys.exit(main())
