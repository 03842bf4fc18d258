"""Autoscaling: how many workers the consumers need, from demand and supply (pure).

Demand is how much of the time consumers wait with nothing buffered
(``ClientHeartbeat.starved``, the hungriest consumer counts); supply is how
full the workers' task buffers are (``buffer_fill`` in their heartbeat stats).
Consumers that wait while every buffer is near empty mean the producers are the
bottleneck: one worker more. Buffers that stay full while no consumer waits
mean idle workers: one worker fewer. Hysteresis: a step needs a whole
``window_s`` of observations since the last step that all agree (the mean
starved fraction for a step up, every observation for a step down, with a gap
between the thresholds), and steps are at least ``cooldown_s`` apart. The
result is clamped to ``[min_workers, max_workers]`` (at least 1).

>>> scaler = Autoscaler(Policy(window_s=2, cooldown_s=2))
>>> for t in range(3):  # starved consumers, empty buffers: one more worker
...     advice = scaler.observe(Signals(float(t), workers=1, starved=0.9, fill=0.0))
>>> advice.recommended_workers, advice.reason.split(":")[0]
(2, 'up')
>>> for t in range(3, 5):  # full buffers, nobody waits: one fewer
...     advice = scaler.observe(Signals(float(t), workers=2, starved=0.0, fill=0.9))
>>> advice.recommended_workers, advice.reason.split(":")[0]
(1, 'down')
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any


def _is_seconds(value: Any) -> bool:
    """``value`` is a finite number of seconds, not negative."""
    return isinstance(value, int | float) and math.isfinite(value) and value >= 0


def _is_fraction(value: Any) -> bool:
    """``value`` is a number in ``[0, 1]``."""
    return isinstance(value, int | float) and 0 <= value <= 1


@dataclass(frozen=True, slots=True)
class Policy:
    """The thresholds and timing of the rule (see the module docstring)."""

    window_s: float = 10.0
    """Observations a step looks at (and needs, since the last step)."""
    cooldown_s: float = 30.0
    """At most one step per this many seconds."""
    starved_up: float = 0.2
    """Step up when consumers wait at least this fraction of the time, ..."""
    fill_up: float = 0.25
    """... while the workers' buffers are at most this full on average."""
    starved_down: float = 0.02
    """Step down when no consumer waits more than this fraction of the time, ..."""
    fill_down: float = 0.5
    """... while the buffers stay at least this full (idle workers: full)."""
    min_workers: int = 1
    max_workers: int | None = None

    def __post_init__(self) -> None:
        for name in ("window_s", "cooldown_s"):
            value = getattr(self, name)
            if not _is_seconds(value):
                raise ValueError(f"Policy.{name} must be >= 0 seconds, got {value!r}")
        for name in ("starved_up", "fill_up", "starved_down", "fill_down"):
            value = getattr(self, name)
            if not _is_fraction(value):
                raise ValueError(f"Policy.{name} must be in [0, 1], got {value!r}")
        if self.starved_down >= self.starved_up or self.fill_up >= self.fill_down:
            raise ValueError(
                "Policy thresholds need a gap: starved_down < starved_up and "
                f"fill_up < fill_down, got {self!r}"
            )
        self._check_workers()

    def _check_workers(self) -> None:
        """``min_workers`` at least 1, ``max_workers`` (if any) at least that."""
        if not isinstance(self.min_workers, int) or self.min_workers < 1:
            raise ValueError(
                f"Policy.min_workers must be >= 1, got {self.min_workers!r}"
            )
        top = self.max_workers
        if top is not None and (not isinstance(top, int) or top < self.min_workers):
            raise ValueError(
                f"Policy.max_workers must be >= min_workers ({self.min_workers}), "
                f"got {top!r}"
            )

    def clamp(self, workers: int) -> int:
        """``workers`` within ``[min_workers, max_workers]``."""
        top = workers if self.max_workers is None else self.max_workers
        return max(self.min_workers, min(workers, top))


def kind_of(
    waited: float | None, fill: float | None, policy: Policy, blocked: float = 0.0
) -> str:
    """What holds consumers back: the verdict that status and scaling share.

    ``waited``: how much of the time consumers waited; ``fill``: how full the
    workers' buffers are; ``blocked``: how much of the producers' time they
    were blocked on a full buffer (``diagnosis.py``).

    >>> policy = Policy()
    >>> [kind_of(0.5, 0.1, policy), kind_of(0.5, 0.9, policy), kind_of(0.0, 0.9, policy)]
    ['input-bound', 'network-bound', 'trainer-bound']
    >>> kind_of(0.1, 0.3, policy), kind_of(None, None, policy)
    ('balanced', 'unknown')
    """
    if waited is None:
        return "unknown"
    if waited >= policy.starved_up:
        full = fill is not None and fill >= policy.fill_down
        return "network-bound" if full or blocked >= 0.5 else "input-bound"
    return "trainer-bound" if waited <= policy.starved_down else "balanced"


@dataclass(frozen=True, slots=True)
class Signals:
    """One observation.

    ``workers``: live workers not draining; ``starved``: the hungriest
    consumer's waiting fraction (None: no consumer); ``fill``: the mean buffer
    fill of the workers' producing tasks (None: none produces, all idle).
    """

    time: float
    workers: int
    starved: float | None
    fill: float | None


@dataclass(frozen=True, slots=True)
class Advice:
    """The recommendation and why (what the status shows under ``"autoscale"``)."""

    recommended_workers: int
    workers: int
    reason: str
    starved: float
    buffer_fill: float
    last_step_s: float | None
    """Seconds since the last step (None: none yet)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "recommended_workers": self.recommended_workers,
            "workers": self.workers,
            "reason": self.reason,
            "starved": round(self.starved, 3),
            "buffer_fill": round(self.buffer_fill, 3),
            "last_step_s": None
            if self.last_step_s is None
            else round(self.last_step_s, 1),
        }


class Autoscaler:
    """Turns observations into a recommended worker count, one step at a time."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = Policy() if policy is None else policy
        self._window: deque[Signals] = deque()
        self._target: int | None = None
        self._last_step: float | None = None
        self._since = -math.inf  # observations before this describe another count
        self.advice = Advice(self.policy.clamp(1), 0, "no observation yet", 0, 0, None)

    def observe(self, signals: Signals) -> Advice:
        """Takes one observation; returns (and keeps) the advice it leads to."""
        now = signals.time
        self._slide(signals)
        starved = [s.starved or 0.0 for s in self._window]
        fill = [1.0 if s.fill is None else s.fill for s in self._window]
        mean_starved, mean_fill = sum(starved) / len(starved), sum(fill) / len(fill)
        step, reason = self._decide(signals, starved, fill, mean_starved, mean_fill)
        target = self._take(signals, step)
        self.advice = Advice(
            target,
            signals.workers,
            reason,
            mean_starved,
            mean_fill,
            None if self._last_step is None else now - self._last_step,
        )
        return self.advice

    def _slide(self, signals: Signals) -> None:
        """Adds ``signals`` to the window and drops what fell out of it."""
        now = signals.time
        if self._since == -math.inf:
            self._since = now
        self._window.append(signals)
        while self._window and self._window[0].time < now - self.policy.window_s:
            self._window.popleft()

    def _take(self, signals: Signals, step: int) -> int:
        """The target, moved by ``step`` workers (a step starts a new window)."""
        if step:
            self._target = self.policy.clamp(max(1, signals.workers) + step)
            self._last_step, self._since = signals.time, signals.time
            self._window.clear()
        if self._target is None:
            self._target = self.policy.clamp(max(1, signals.workers))
        return self._target

    def _decide(
        self,
        signals: Signals,
        starved: list[float],
        fill: list[float],
        mean_starved: float,
        mean_fill: float,
    ) -> tuple[int, str]:
        """``(step, reason)``: +1, -1 or 0 workers, and why."""
        policy, workers = self.policy, signals.workers
        figures = f"consumers waited {mean_starved:.0%}, buffers {mean_fill:.0%} full"
        held = self._held(signals.time, workers, figures)
        if held is not None:
            return 0, held
        kind = kind_of(mean_starved, mean_fill, policy)
        up = kind == "input-bound" and mean_fill <= policy.fill_up
        if up and (policy.max_workers is None or workers < policy.max_workers):
            return +1, f"up: {figures}: producers are the bottleneck"
        if self._idle(starved, fill) and workers > policy.min_workers:
            return -1, f"down: {figures}: workers idle"
        if kind == "network-bound":
            return 0, f"hold: {figures}: network-bound, more workers would not help"
        return 0, f"hold: {figures}"

    def _held(self, now: float, workers: int, figures: str) -> str | None:
        """Why no step may be taken now, whatever the signals say (None: it may)."""
        policy = self.policy
        if workers == 0:
            return "hold: no worker registered"
        if now - self._since < policy.window_s:
            return f"hold: observing for {policy.window_s:g} s ({figures})"
        if self._last_step is not None and now - self._last_step < policy.cooldown_s:
            return f"hold: cooling down ({figures})"
        return None

    def _idle(self, starved: list[float], fill: list[float]) -> bool:
        """Every observation of the window says: nobody waits, buffers full."""
        policy = self.policy
        return all(
            kind_of(s, f, policy) == "trainer-bound" and f >= policy.fill_down
            for s, f in zip(starved, fill, strict=True)
        )
