"""A starved training run, and where its time goes (docs/observability.md).

One dispatcher and one worker in this process; the pipeline decodes each
element with real numpy work, the trainer takes 2 ms per batch. After a few
seconds the script prints what ``zmqdata status --job train`` prints, saves
the plot of ``observe.plot`` to ``where_time_goes.png`` and, with ``--trace``,
a 2-second trace of every process (what ``zmqdata trace`` records).

    python examples/where_time_goes.py [--seconds 8] [--png PATH] [--trace PATH]
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

import zmqdata as zd
from zmqdata import observe, service


def decode(index: np.int64) -> np.ndarray:
    """Stands for a JPEG decode: ~3 ms of numpy on a 256x256 image."""
    rng = np.random.default_rng(int(index))
    image = rng.random((256, 256), dtype=np.float32)
    for _ in range(4):
        image = np.sqrt(image * image + 1.0)
    return image


def augment(image: np.ndarray) -> np.ndarray:
    return image[::-1, :]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--png", default="where_time_goes.png")
    parser.add_argument("--trace", default=None, help="also record a trace here")
    args = parser.parse_args()
    service.share_traces(True)  # this trainer's waits and steps join traces
    with (
        service.DispatchServer() as dispatcher,
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
    ):
        ds = zd.Dataset.range(10**9).map(decode).map(augment).batch(16)
        ds = ds.apply(
            service.distribute("distributed_epoch", dispatcher.target, "train")
        )
        stop = threading.Event()

        def train() -> None:
            with iter(ds) as batches:
                for _ in batches:
                    if stop.wait(0.002):  # the trainer's step
                        return

        trainer = threading.Thread(target=train)
        trainer.start()
        time.sleep(args.seconds)
        status = service.get_status(dispatcher.target)
        if args.trace:
            trace = service.trace(dispatcher.target, seconds=2.0, path=args.trace)
        stop.set()
        trainer.join()
    print(observe.report(status, "train"))
    observe.plot(status, "train").savefig(args.png, dpi=100, bbox_inches="tight")
    print(f"\nplot: {args.png}")
    if args.trace:
        names = {
            e["pid"]: e["args"]["name"]
            for e in trace["traceEvents"]
            if e.get("name") == "process_name"
        }
        spans: dict[str, int] = {}
        for event in trace["traceEvents"]:
            if event.get("ph") == "X":
                key = f"{names[event['pid']]}: {event['name']}"
                spans[key] = spans.get(key, 0) + 1
        print(f"trace: {args.trace}")
        for key, count in sorted(spans.items()):
            print(f"  {count:6d}  {key}")


if __name__ == "__main__":
    main()
