"""What a worker's ``Error`` reply to a read means: ask again, or fail with it.

``ABSENT`` (the worker does not hold the task or split: not started yet, or
moved on) is a state: the reader asks again later. Any other code is the
task's own error (its pipeline raised: a file gone, a user function; the
worker names itself and the task) or a refused request: the read fails.

>>> refused(m.Error(code=m.ABSENT, message="task 3 is not on this worker"))
>>> refused(m.Error(code="NOT_FOUND", message="a.tar: no such file"))
NotFoundError('a.tar: no such file')
"""

from __future__ import annotations

from zmqdata._wire import messages as m
from zmqdata.errors import ZmqDataError, from_code


def refused(error: m.Error) -> ZmqDataError | None:
    """None to ask again later, else the error to fail the read with."""
    return None if error.code == m.ABSENT else from_code(error.code, error.message)
