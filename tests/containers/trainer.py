"""A trainer in the compose network: reads one ``distributed_epoch`` job end to end.

Run by tests/containers/run.sh, once the workers have registered, as
``python trainer.py DISPATCHER ELEMENTS`` in a container of the deployment's
network, so it reads from the container addresses the workers advertise. It
reads ``range(ELEMENTS)``, each element tagged with the host name of the
worker that produced it, prints how many each worker served, and exits
non-zero unless every element arrived exactly once.
"""

from __future__ import annotations

import collections
import socket
import sys

import zmqdata as zd
from zmqdata import service


def main(dispatcher: str, elements: int) -> None:
    """Reads the job and checks what arrived."""
    dataset = (
        zd.Dataset.range(elements)
        .map(lambda x: (x, socket.gethostname()))
        .apply(service.distribute("distributed_epoch", dispatcher, job_name="train"))
    )
    counts: collections.Counter[int] = collections.Counter()
    hosts: collections.Counter[str] = collections.Counter()
    for value, host in dataset.as_numpy_iterator():
        counts[int(value)] += 1
        hosts[str(host)] += 1
    missing = sorted(set(range(elements)) - set(counts))
    repeated = sorted(k for k, n in counts.items() if n > 1)
    extra = sorted(set(counts) - set(range(elements)))
    print(f"trainer: {sum(counts.values())} elements from {dict(hosts)}", flush=True)
    if missing or repeated or extra:
        sys.exit(
            f"trainer: FAILED: missing {missing[:10]} ({len(missing)}), repeated "
            f"{repeated[:10]} ({len(repeated)}), unexpected {extra[:10]}"
        )
    print(f"trainer: OK: {elements} elements exactly once")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
