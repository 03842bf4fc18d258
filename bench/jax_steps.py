"""JAX: steps/s of a small model fed by zmqdata against the same model fed by
grain.

Issue 28's bench. One JAX process on the CPU trains a 2-layer MLP (the
37,632 values of a 3x112x112 image -> 32 ReLU units -> 3 classes, the class of
an image being its brightest channel) with one jitted SGD step per batch of 64
(``Model``: a few ms a step on this machine's class). Its input is
bench/peers.py's images pipeline (2,048 seeded JPEG files, quick: 512: decode,
random 112x112 crop, random flip, normalize to float32 CHW, batch 64). In
this process (the trainer) each batch becomes ``{"images", "mask"}``, padded
to 64 rows where shorter, the mask marking its real rows
(``pipelines.masked_batch``: a full batch is not copied), so the jitted step
sees one shape and is compiled once: zmqdata's workers each batch the files
they are handed, so an epoch may end with two partial batches. Systems, all
in this process's run, 2 worker processes for each that has workers:

* ``model``: the step alone, on one batch put on the device once, as many
  steps as an epoch has full and partial batches: the rate without input;
* ``local``: the pipeline in this process, no workers, each batch
  ``masked_batch`` then ``jax.device_put``: one core's rate (two workers on
  the 2 cores can reach twice it, less the trainer's share);
* ``grain``: ``grain.MapDataset.source(files).map(image_element).batch(64)``,
  ``to_iter_dataset()``, ``mp_prefetch`` with 2 worker processes
  (bench/grain_pipelines.py, as the images section reads it), each batch
  ``masked_batch`` then ``jax.device_put`` to the sharding, as grain users
  feed a model; an iterator an epoch: grain spawns its 2 workers for each;
* ``grain_repeat``: the same with ``.repeat(n)`` after ``.batch(64)`` (``n``:
  every epoch the section reads; a finite repeat, as closing an iterator
  whose workers still ran took grain 25 s a worker here), one iterator for
  the whole run, its workers started once: how a training loop over many
  epochs reads grain; the timed epoch gives its steady rate. So that it does,
  ``to_iter_dataset(ReadOptions(num_threads=0, prefetch_buffer_size=0))``:
  each worker makes one batch at a time, at most one ahead in its queue
  (grain's default ``ReadOptions``, 16 threads and 500 elements, here 500
  *batches*, a worker: read continuously, the first 3 epochs came at
  1,000-1,300 images/s while the workers filled those buffers, then 6,000-
  8,000 images/s out of them, which is what an epoch between other systems'
  epochs would time); and between its epochs the workers are stopped
  (``SIGSTOP``, then ``SIGCONT`` when its next epoch starts), so they make
  nothing while the other systems run, as in one loop that never pauses;
* ``zmqdata``: the pipeline read with ``distributed_epoch``,
  ``job_name="jax_steps"``, from a ``zmqdata up`` deployment of 2 workers,
  then ``.map(masked_batch)`` (in the trainer, after the read), through
  ``zmqdata.jax.global_batches`` with its defaults (2 batches prefetched to
  the device; the named job's read made multi-rank, ``num_consumers=1``,
  ``consumer_index=0``, from the one JAX process); one ``global_batches`` an
  epoch.

The sharding is a ``NamedSharding`` over a 1-device mesh, batch axis
``"data"``. JAX is imported by the functions that use it, not by this module:
grain spawns its workers for every epoch and each imports the main module.

Each reading system's first epoch is checked, not timed: every batch a dict
of ``jax.Array``s of the sharding, 64 rows, and the real rows are the local
pipeline's images as a multiset (bench/snapshots.py's check). Then a warm-up
epoch of each system and ``repeats`` rounds of one epoch of each, the order
reversed every other round (bench/exactly_once.py's ``interleaved``); every
timed epoch of a reading system must train on all the images. Figures per
epoch (the clock stops when the last step's parameters are ready): steps/s,
images/s (real rows), steps, and the trainer's CPU ms per step
(``getrusage``: the model's compute threads included). Medians with the
rounds' min-max; zmqdata over each grain setup of the medians and per round:
images/s (the fair figure: zmqdata's epoch may have one step more) and
steps/s; the final table's row is against the best grain setup by images/s. A
section for bench/run.py::

    SECTIONS["jax_steps"] = jax_steps.jax_steps

or on its own: ``python bench/jax_steps.py [--quick] [--repeats N]
[--workloads model,zmqdata]`` (the workloads are the systems).
"""

from __future__ import annotations

import importlib.util
import itertools
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench import peers
from bench.common import Bench, Stat, distributed, number, section_main, times
from bench.exactly_once import Figures, Pass, interleaved
from bench.formats import round_ratios
from bench.packing import _spread
from bench.pipelines import CROP, masked_batch
from bench.snapshots import Reference, check_epoch

WORKERS = peers.WORKERS
SYSTEMS = ("model", "local", "grain", "grain_repeat", "zmqdata")
PEERS = ("grain", "grain_repeat")
"""The grain setups zmqdata's ratio is taken against (the best of them)."""
READING = ("local", *PEERS, "zmqdata")
"""The systems that read the images (``model`` reads nothing)."""
LABELS = {
    "model": "the model alone: one batch on the device",
    "local": "the pipeline in this process, no workers",
    "grain": f"grain mp_prefetch(num_workers={WORKERS}), an iterator an epoch",
    "grain_repeat": "grain, one iterator for every epoch, workers a batch ahead",
    "zmqdata": (
        f"zmqdata.jax.global_batches, distributed_epoch, `zmqdata up` {WORKERS} workers"
    ),
}
HIDDEN = 32
CLASSES = 3
LEARNING_RATE = 0.01
AXIS = "data"
JOB = "jax_steps"
"""zmqdata's job: named, as ``global_batches`` makes a named job's read
multi-rank (here 1 of 1 consumers)."""
Reader = peers.Reader


# ------------------------------------------------------------------ the model


def sharding() -> Any:
    """A ``NamedSharding`` over a mesh of this process's first device, the
    batch axis (``AXIS``) along it."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(
        Mesh(np.array(jax.devices()[:1]), (AXIS,)), PartitionSpec(AXIS)
    )


class Model:
    """A 2-layer MLP classifying an image by its brightest channel, trained by
    SGD: one jitted step per batch (``{"images", "mask"}``: the loss averages
    over the real rows).

    >>> model = Model(features=4, hidden=2)
    >>> ones = {"images": np.ones((3, 1, 2, 2), np.float32), "mask": np.ones(3, np.float32)}
    >>> model.train([ones, ones])
    (2, 6)
    """

    def __init__(self, features: int, hidden: int = HIDDEN, seed: int = 0) -> None:
        import jax
        import jax.numpy as jnp

        first, second = jax.random.split(jax.random.key(seed))
        self.params = {
            "w1": jax.random.normal(first, (features, hidden)) / np.sqrt(features),
            "b1": jnp.zeros(hidden),
            "w2": jax.random.normal(second, (hidden, CLASSES)) / np.sqrt(hidden),
            "b2": jnp.zeros(CLASSES),
        }

        def loss(params: Any, images: Any, mask: Any) -> Any:
            labels = jnp.argmax(images.mean(axis=(2, 3)), axis=1)
            flat = images.reshape(images.shape[0], -1)
            hidden = jax.nn.relu(flat @ params["w1"] + params["b1"])
            logits = jax.nn.log_softmax(hidden @ params["w2"] + params["b2"])
            picked = jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0]
            return -jnp.sum(picked * mask) / jnp.maximum(jnp.sum(mask), 1)

        def step(params: Any, images: Any, mask: Any) -> tuple[Any, Any]:
            grads = jax.grad(loss)(params, images, mask)
            new = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
            return new, jnp.sum(mask)

        self._step = jax.jit(step, donate_argnums=0)

    def train(self, batches: Iterable[Any]) -> tuple[int, int]:
        """One step per batch of ``batches``; the steps and the real images
        trained on, once the last step's parameters are ready."""
        import jax

        params, counts = self.params, []
        for batch in batches:
            params, count = self._step(params, batch["images"], batch["mask"])
            counts.append(count)
        self.params = jax.block_until_ready(params)
        return len(counts), int(sum(jax.device_get(counts)))


# ------------------------------------------------------------------ systems


def batches_of(pipeline: peers.Pipeline) -> int:
    """The batches of an epoch of ``pipeline`` batched in one stream."""
    return -(-len(pipeline.paths) // pipeline.batch)


@contextmanager
def _model(pipeline: peers.Pipeline, where: Any, reads: int) -> Iterator[Reader]:
    import jax

    batch = jax.device_put(masked_batch(next(iter(pipeline.local()))), where)
    yield lambda: itertools.repeat(batch, batches_of(pipeline))


@contextmanager
def _local(pipeline: peers.Pipeline, where: Any, reads: int) -> Iterator[Reader]:
    import jax

    def epoch() -> Iterator[Any]:
        for batch in pipeline.local():
            yield jax.device_put(masked_batch(batch), where)

    yield epoch


@contextmanager
def _grain(
    pipeline: peers.Pipeline, where: Any, reads: int | None = None
) -> Iterator[Reader]:
    """grain's batches put on the devices: an iterator an epoch (grain starts
    its workers for each, when the epoch's first batch is asked for), or one
    iterator for ``reads`` epochs, each worker at most a batch ahead, the
    workers stopped (``SIGSTOP``) between the epochs: they make nothing ahead
    while other systems run, as in one training loop that never pauses."""
    import grain
    import jax

    from bench import grain_pipelines

    def put(batches: Iterable[Any]) -> Iterator[Any]:
        for batch in batches:
            yield jax.device_put(masked_batch(batch), where)

    if reads is None:
        dataset = grain_pipelines.loader(
            pipeline.paths, pipeline.per_file, pipeline.batch, False, WORKERS
        )
        yield lambda: put(dataset)
        return
    ahead = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    dataset = grain_pipelines.loader(
        pipeline.paths, pipeline.per_file, pipeline.batch, False, WORKERS, reads, ahead
    )
    iterator = iter(dataset)
    steps = batches_of(pipeline)
    workers: list[int] = []

    def signal_workers(signum: int) -> None:
        for pid in workers:
            os.kill(pid, signum)

    def read() -> Iterator[Any]:
        signal_workers(signal.SIGCONT)
        before = {child.pid for child in multiprocessing.active_children()}
        yield from put(itertools.islice(iterator, steps))
        if not workers:  # started by the first batch
            children = multiprocessing.active_children()
            workers.extend(c.pid for c in children if c.pid not in before)
        signal_workers(signal.SIGSTOP)

    try:
        yield read
    finally:
        signal_workers(signal.SIGCONT)
        iterator.close()


@contextmanager
def _zmqdata(pipeline: peers.Pipeline, where: Any, reads: int) -> Iterator[Reader]:
    from zmqdata.jax import global_batches

    with peers.zmqdata_up(WORKERS) as target:
        remote = distributed(
            pipeline.dataset(),
            target,
            processing_mode="distributed_epoch",
            job_name=JOB,
        ).map(masked_batch)

        def epoch() -> Iterator[Any]:
            with global_batches(remote, where) as batches:
                yield from batches

        yield epoch


READERS: dict[
    str, Callable[[peers.Pipeline, Any, int], AbstractContextManager[Reader]]
] = {
    "model": _model,
    "local": _local,
    "grain": lambda pipeline, where, reads: _grain(pipeline, where),
    "grain_repeat": _grain,
    "zmqdata": _zmqdata,
}
"""Each system's reader of ``pipeline``'s batches on the devices of sharding
``where``, for ``reads`` reads of an epoch."""


# ------------------------------------------------------------------ checking


def host_images(name: str, read: Reader, where: Any, rows: int) -> Reader:
    """``read``'s batches checked (a dict of ``jax.Array``s of sharding
    ``where``, ``rows`` rows), as numpy arrays of their real rows."""
    import jax

    def epoch() -> Iterator[np.ndarray[Any, Any]]:
        for batch in read():
            leaves = (batch["images"], batch["mask"])
            if not all(
                isinstance(leaf, jax.Array)
                and leaf.shape[0] == rows
                and leaf.sharding.is_equivalent_to(where, leaf.ndim)
                for leaf in leaves
            ):
                got = [(type(leaf).__name__, leaf.shape) for leaf in leaves]
                raise RuntimeError(f"{name}: a batch of {got}, not of {where}")
            yield np.asarray(batch["images"])[np.asarray(batch["mask"]) > 0]

    return epoch


# ------------------------------------------------------------------ measuring


def train_pass(name: str, model: Model, read: Reader, images: int | None) -> Pass:
    """A pass: ``model`` trained on one epoch of ``read``, which must hold
    ``images`` real images (unless None); steps/s, images/s, steps, trainer
    CPU ms per step."""

    def once() -> Figures:
        batches = read()
        cpu, start = peers.cpu_s(), time.perf_counter()
        steps, seen = model.train(batches)
        wall, cpu = time.perf_counter() - start, peers.cpu_s() - cpu
        if images is not None and seen != images:
            raise RuntimeError(f"{name} trained on {seen} images, expected {images}")
        return {
            "steps_s": steps / wall,
            "images_s": seen / wall,
            "steps": steps,
            "cpu_ms_per_step": cpu * 1000 / steps,
        }

    return once


def ratios(figures: dict[str, dict[str, Stat]]) -> dict[str, Any]:
    """zmqdata over each grain setup (images/s, steps/s) and over the model
    alone (steps/s), of the medians and per round."""
    out: dict[str, Any] = {}
    if "zmqdata" not in figures:
        return out
    ours = figures["zmqdata"]
    bases = [(peer, ("images_s", "steps_s")) for peer in PEERS]
    for base, keys in [*bases, ("model", ("steps_s",))]:
        if base not in figures:
            continue
        for key in keys:
            theirs = figures[base][key]
            out.setdefault(base, {})[key] = {
                "ratio": ours[key] / theirs,
                "rounds": round_ratios(ours[key], theirs),
            }
    return out


def measure(
    bench: Bench, systems: Sequence[str], pipeline: peers.Pipeline
) -> dict[str, Any]:
    """``systems`` feeding one ``Model`` with ``pipeline``'s images: each
    reading system checked once, then interleaved rounds; their figures and
    zmqdata's ratios. grain, where not installed or failing, is skipped with a
    line."""
    import jax

    load = os.getloadavg()[0]
    reference = Reference()
    for batch in pipeline.local():
        reference.add(batch)
    where = sharding()
    model = Model(3 * CROP * CROP)
    reads = bench.repeats + 2  # the checked epoch, the warm-up, the rounds
    out: dict[str, Any] = {}
    passes: dict[str, Pass] = {}
    with ExitStack() as stack:
        for name in (name for name in SYSTEMS if name in systems):
            reason = peers.missing("grain" if name in PEERS else name)
            if reason is None:
                try:
                    read = stack.enter_context(READERS[name](pipeline, where, reads))
                    out[name] = {"label": LABELS[name]}
                    images = None
                    if name in READING:
                        checked = host_images(name, read, where, pipeline.batch)
                        out[name]["check"] = check_epoch(
                            name, checked, reference, False
                        )
                        images = reference.count
                    passes[name] = train_pass(name, model, read, images)
                    continue
                except Exception as error:
                    if name not in PEERS:  # the others must work
                        raise
                    reason = f"failed: {error!r}"[:300]
            print(f"\n  jax_steps: {name} skipped: {reason}", file=sys.stderr)
            out[name] = {"label": LABELS[name], "skipped": reason}
        figures = interleaved(passes, bench.repeats) if passes else {}
    for name, stats in figures.items():
        out[name].update(stats)
    result = {
        "images": reference.count,
        "batch": pipeline.batch,
        "workers": WORKERS,
        "hidden": HIDDEN,
        "parameters": sum(int(p.size) for p in jax.tree.leaves(model.params)),
        "jax": jax.__version__,
        "device": str(jax.devices()[0]),
        "repeats": bench.repeats,
        "load_average": round(load, 2),
        "systems": out,
        "ratios": ratios(figures),
    }
    ran = [name for name in PEERS if name in figures]
    if ran and "zmqdata" in figures:
        result["best_peer"] = max(ran, key=lambda name: figures[name]["images_s"])
    return result


def jax_steps(bench: Bench, systems: Sequence[str] = SYSTEMS) -> dict[str, Any]:
    """The section: bench/peers.py's images (quick: 512 files), every system
    in ``systems``; skipped with a line where JAX or Pillow is missing."""
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}, of {SYSTEMS}")
    for module, extra in (("jax", "jax"), ("PIL", "bench")):
        if importlib.util.find_spec(module) is None:
            reason = f"`import {module}` fails (pip install -e '.[{extra}]')"
            print(f"\n  jax_steps skipped: {reason}", file=sys.stderr)
            return {"skipped": reason}
    return measure(bench, systems, peers.image_pipeline(512 if bench.quick else 2048))


# ------------------------------------------------------------------ tables


def _ms(value: float) -> str:
    return f"{value:.1f}"


def _steps(value: float) -> str:
    return f"{value:g}"


NAMES = {"images_s": "images/s", "steps_s": "steps/s"}


def details(result: dict[str, Any]) -> str:
    """The section's own table: every system, then zmqdata's ratios."""
    from bench.report import markdown

    if "skipped" in result:
        return f"skipped: {result['skipped']}"
    systems = result["systems"]
    alone = systems.get("model", {})
    rows = []
    for figures in systems.values():
        if "skipped" in figures:
            rows.append((figures["label"], "skipped: " + figures["skipped"], *"————"))
            continue
        rate = figures["steps_s"]
        rows.append(
            (
                figures["label"],
                _spread(rate),
                times(rate / alone["steps_s"]) if "steps_s" in alone else "—",
                _spread(figures["images_s"]),
                _spread(figures["steps"], _steps),
                _spread(figures["cpu_ms_per_step"], _ms),
            )
        )
    header = (
        "system",
        "steps/s (min-max)",
        "of the model alone",
        "images/s (min-max)",
        "steps per epoch",
        "trainer CPU ms per step (min-max)",
    )
    about = (
        f"A 2-layer MLP ({result['parameters']:,} parameters, {result['hidden']}"
        f" hidden units), one jitted SGD step per batch of {result['batch']},"
        f" JAX {result['jax']} on {result['device']}; {result['images']:,} images"
        f" an epoch, {result['workers']} worker processes per system with workers;"
        f" medians of {result['repeats']} interleaved rounds after a checked epoch"
        " and a warm-up epoch of each; 1-minute load average"
        f" {result['load_average']:.2f} at the start."
    )
    lines = [
        f"* zmqdata over {base}, {NAMES[key]}: {times(r['ratio'])} (per round"
        f" {_spread(r['rounds'], times)})"
        for base, keys in result["ratios"].items()
        for key, r in keys.items()
    ]
    if "best_peer" in result:
        best = systems[result["best_peer"]]["label"]
        lines.append(f"* the best grain setup (images/s): {best}")
    return "\n\n".join([about, markdown(header, rows), "\n".join(lines)])


def rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The final table's row: zmqdata's trained images/s against the best
    grain setup's (no target: issue 28 asks for the figure)."""
    from bench.report import NONE

    if "best_peer" not in result:
        return []
    best, systems = result["best_peer"], result["systems"]
    grain = result["ratios"][best]
    peer = systems[best]["label"]
    return [
        (
            f"jax_steps: images/s through a JAX step, zmqdata vs {peer}",
            f"{number(systems['zmqdata']['images_s'])} images/s",
            f"{number(systems[best]['images_s'])} images/s",
            times(grain["images_s"]["ratio"]),
            NONE,
            NONE,
            NONE,
        )
    ]


if __name__ == "__main__":
    section_main(__doc__, jax_steps, details, SYSTEMS)
