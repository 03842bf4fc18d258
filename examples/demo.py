"""The zmqdata demo: a local deployment feeding a training-style loop.

Run with ``make demo``. It

1. starts ``zmqdata up configs/local.yaml`` (a dispatcher and two worker
   processes) and waits for its readiness line;
2. runs a training-style loop: the workers generate synthetic uint8 images,
   "decode" and augment them with numpy (random crop, flip, normalize), the
   service hands each image to exactly one reader (``distributed_epoch``), and
   the trainer batches them locally, with a progress bar and throughput;
3. checks that every image arrived exactly once, with the right pixels;
4. stops the deployment with SIGINT and checks that it exited 0.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import zmqdata as zd
from zmqdata import service

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "local.yaml"
IMAGES, SIZE, CROP, BATCH, EPOCHS = 4096, 64, 56, 64, 2


def decode(index: np.int64) -> tuple[np.ndarray, np.int64]:
    """Stands in for reading and decoding a JPEG: a seeded uint8 image."""
    rng = np.random.default_rng(int(index))
    return rng.integers(0, 256, size=(SIZE, SIZE, 3), dtype=np.uint8), index


def augment(image: np.ndarray, index: np.int64) -> tuple[np.ndarray, np.int64]:
    """Random crop and flip (seeded by the index, so checkable), then normalize."""
    rng = np.random.default_rng(int(index) + 1_000_000)
    top, left = rng.integers(0, SIZE - CROP + 1, size=2)
    image = image[top : top + CROP, left : left + CROP]
    if rng.random() < 0.5:
        image = image[:, ::-1]
    mean, std = np.float32(127.5), np.float32(64.0)
    return (image.astype(np.float32) - mean) / std, index


def pipeline() -> zd.Dataset:
    return zd.Dataset.range(IMAGES).map(decode).map(augment)


def progress(done: int, total: int, started: float, epoch: int) -> None:
    """A progress bar redrawn in place, on a terminal only (logs get no ``\\r``)."""
    if not sys.stderr.isatty():
        return
    width = 30
    filled = width * done // total
    elapsed = max(time.perf_counter() - started, 1e-9)
    sys.stderr.write(
        f"\r  epoch {epoch} [{'#' * filled}{'.' * (width - filled)}] "
        f"{done}/{total} images  {done / elapsed:7.0f} img/s"
    )
    sys.stderr.flush()


@contextmanager
def deployment() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Runs ``zmqdata up configs/local.yaml`` until its readiness line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "zmqdata", "up", str(CONFIG)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    ready: list[str] = []
    event = threading.Event()

    def drain() -> None:  # keep reading, so the deployment never blocks on logging
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if match := re.search(r"deployment ready: dispatcher (\S+),", line):
                ready.append(match.group(1))
                print(f"  {line.strip()}")
                event.set()
        event.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        if not event.wait(30) or not ready:
            sys.exit("demo failed: the deployment did not start:\n" + "".join(lines))
        yield ready[0], proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        reader.join(5)


def expected_checksums() -> np.ndarray:
    return np.array(
        [float(augment(*decode(np.int64(i)))[0].sum()) for i in range(IMAGES)]
    )


def train(target: str) -> None:
    expected = expected_checksums()
    for epoch in range(1, EPOCHS + 1):
        dataset = (
            pipeline()
            .apply(service.distribute("distributed_epoch", target))
            .batch(BATCH)
        )
        seen = np.zeros(IMAGES, dtype=np.int64)
        checksums = np.zeros(IMAGES)
        started = time.perf_counter()
        done = 0
        for images, labels in dataset:
            # A stand-in for a training step: a tiny linear model's forward pass.
            _ = images.reshape(len(labels), -1).mean(axis=1)
            seen[labels] += 1
            checksums[labels] = images.sum(axis=(1, 2, 3))
            done += len(labels)
            progress(done, IMAGES, started, epoch)
        elapsed = time.perf_counter() - started
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        megabytes = done * CROP * CROP * 3 * 4 / 1e6
        print(
            f"epoch {epoch}: {done} images in {elapsed:.2f} s "
            f"({done / elapsed:.0f} images/s, {megabytes / elapsed:.0f} MB/s)"
        )
        if not (seen == 1).all():
            missing, twice = int((seen == 0).sum()), int((seen > 1).sum())
            sys.exit(f"demo failed: {missing} images missing, {twice} repeated")
        if not np.allclose(checksums, expected, rtol=1e-4):
            sys.exit("demo failed: some images have the wrong pixels")
        print(f"epoch {epoch}: every image arrived exactly once, pixels checked")


def main() -> None:
    print(f"starting: zmqdata up {CONFIG.relative_to(ROOT)}")
    with deployment() as (target, proc):
        train(target)
        status = service.get_status(target)
        print(
            f"cluster: {len(status['workers'])} workers, "
            f"{len(status['datasets'])} dataset(s), {len(status['jobs'])} job(s) "
            "left (each epoch's unnamed job is forgotten once read)"
        )
        print("stopping the deployment (SIGINT)")
    if proc.returncode != 0:
        sys.exit(f"demo failed: zmqdata up exited {proc.returncode}")
    print("ok: the deployment stopped cleanly (exit 0)")


if __name__ == "__main__":
    main()
