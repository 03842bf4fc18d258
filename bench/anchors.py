"""tf.data service figures and the suite's targets (not measured here).

Every ``TF_*`` constant is copied from ``shared/ANCHORS.md``: tf.data service,
TF 2.21.0, workers as processes, on this project's 2-core machine class. No
script in bench/ measures them; every table that prints one labels it
"ANCHORS". ``make bench-compare`` measures tf.data side by side where
tensorflow installs (bench/compare.py).
"""

from __future__ import annotations

MIB = 2**20

TF_W1_EL_S = 3_716
"""W1: 200k int64 scalars through the service, 1 worker (elements/s)."""
TF_W2_BATCHES_S = 2_120
"""W2: range(20M).batch(1024) (batches/s)."""
TF_W3_MB_S: dict[tuple[int, str | None], float] = {
    (4 * MIB, None): 1_571,
    (4 * MIB, "AUTO"): 1_089,
    (64 * MIB, None): 452,  # ANCHORS does not name the compression of this row
}
"""W3: float32 tensors, by (element bytes, compression) (MB/s)."""
TF_W4_SPEEDUP = 1.27
"""W4: ~5 ms of CPU per element, 2 workers vs 1."""
TF_W5_FIRST_MS = 21
TF_W5_END_MS = 1_012
"""W5: range(10), iterator created -> first element / -> end of input (ms)."""
TF_W6_EL_S = 3_642
"""W6: coordinated reads, 2 consumers, 1 worker (elements/s)."""

# The targets of issue 7 (ratios to the figures above or to same-run baselines).
TARGET_W1_VS_TF = 20.0
TARGET_W3_VS_TF = 2.0  # 4 MiB, compression=None
TARGET_W3_VS_RAW = 0.70  # of raw pyzmq tcp zero-copy, same run
TARGET_W4_SPEEDUP = 1.7
TARGET_W5_END_MS = 50.0
TARGET_W6_VS_TF = 10.0
MEMORY_CONSTANT_MIB = 32
"""The "+ a constant" of the memory target (peak RSS growth of a consumer <=
element size x max_outstanding_requests + this), chosen by this suite before
measuring: the element the trainer holds, socket buffers, allocator slack."""
