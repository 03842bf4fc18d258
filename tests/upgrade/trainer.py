"""A trainer of either release, reading a ``distributed_epoch`` job as told.

Run as ``python -I trainer.py TARGET N`` by the previous release's interpreter
or by this one's, so it uses only the API both have. Each line on stdin is
how many more elements of ``range(N)`` to read (``all``: to the end); each
element read is printed, then ``read K`` (K read so far) or ``end``.
"""

from __future__ import annotations

import sys
from itertools import islice


def main(target: str, n: int) -> None:
    import zmqdata as zd
    from zmqdata import service

    ds = zd.Dataset.range(n).apply(
        service.distribute("distributed_epoch", target, max_outstanding_requests=4)
    )
    read = 0
    with iter(ds) as iterator:
        for line in sys.stdin:
            count = None if line.strip() == "all" else int(line)
            for element in islice(iterator, count):
                print(int(element))
                read += 1
            print("end" if count is None else f"read {read}", flush=True)
            if count is None:
                return


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
