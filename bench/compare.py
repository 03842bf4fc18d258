"""``make bench-compare``: zmqdata and tf.data service on W1-W6, side by side.

    python bench/compare.py --quick
    python bench/compare.py --only W1,W5

Needs tensorflow (``pip install tensorflow-cpu``). Where ``import tensorflow``
fails it prints one line saying so and exits 0. Otherwise it runs the zmqdata
workloads (bench/workloads.py) and then the same workloads on tf.data service
(bench/tfdata.py), with the same sizes and repetitions, and prints both with
zmqdata/tf.data ratios (for latencies: how many times faster).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report, tfdata
from bench.common import number
from bench.run import add_size_flags, check_sections, make_bench, run_sections

WORKLOADS = ["W1", "W2", "W3", "W4", "W5", "W6"]


def tensorflow_version() -> str | None:
    """TF's version, or None where it does not import (checked in a child
    process: a broken install may crash rather than raise)."""
    done = subprocess.run(
        [sys.executable, "-c", "import tensorflow as tf; print(tf.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return None
    return done.stdout.strip() or "?"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_flags(parser, WORKLOADS)
    args = check_sections(parser, parser.parse_args(argv), WORKLOADS)
    version = tensorflow_version()
    if version is None:
        print(
            "bench-compare: skipped, `import tensorflow` fails here, so tf.data "
            "service cannot run (pip install tensorflow-cpu where it installs)"
        )
        return 0
    bench = make_bench(args)
    try:
        ours = report.headlines(run_sections(bench, args.only))
    finally:
        bench.close()
    theirs = tfdata.run(make_bench(args), args.only)
    rows = []
    for key, value in ours.items():
        if key not in theirs:
            continue
        if key in report.LOWER_IS_BETTER:
            ratio = f"{theirs[key] / value:.1f}x faster"
        else:
            ratio = f"{value / theirs[key]:.2f}x"
        rows.append((key, number(value), number(theirs[key]), ratio))
    header = ("figure", "zmqdata", f"tf.data service (TF {version}, this run)", "ratio")
    print(report.markdown(header, rows))
    if args.quick:
        print(
            "\nnote: QUICK sizes; a tf.data pass includes its ~1 s end of input"
            " (W5), which dominates these short passes: compare at full size"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
