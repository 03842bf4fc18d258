"""Whether the dispatcher processes of a test kept their records valid.

The suite runs every dispatcher with ``ZMQDATA_VALIDATE_STATE=1``
(``tests/conftest.py``): at each tick it checks every invariant of its records
(``ClusterRecords.validate``) and logs a broken one as ``records invalid: ...``.
The chaos trials call ``assert_records_valid`` at the end of each trial.
"""

from __future__ import annotations

from tests.cli.procs import Proc

INVALID = "records invalid"


def assert_records_valid(*dispatchers: Proc) -> None:
    """Fails naming the first lines of any dispatcher that logged a broken invariant."""
    for dispatcher in dispatchers:
        broken = [line for line in list(dispatcher.lines) if INVALID in line]
        assert not broken, broken[:3]
