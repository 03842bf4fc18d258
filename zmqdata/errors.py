"""Errors raised by zmqdata, and their wire codes.

Every error that crosses the network travels as a ``(code, message)`` pair of
strings, never as a pickle; :func:`from_code` rebuilds the matching class on the
receiving side.

>>> from zmqdata import errors
>>> err = errors.from_code("NOT_FOUND", "dataset 'abc' is not registered")
>>> isinstance(err, errors.NotFoundError), err.code
(True, 'NOT_FOUND')
>>> errors.to_code(errors.UnavailableError("down"))
('UNAVAILABLE', 'down')
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import ClassVar

__all__ = [
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "UnavailableError",
    "ZmqDataError",
    "from_code",
    "to_code",
]


class ZmqDataError(Exception):
    """Base class of every zmqdata error; ``code`` names it on the wire."""

    code: ClassVar[str] = "UNKNOWN"

    @property
    def message(self) -> str:
        """The error's message, as given to the constructor."""
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(ZmqDataError, ValueError):
    """A request, a frame or a pipeline is malformed or not allowed."""

    code = "INVALID_ARGUMENT"


class NotFoundError(ZmqDataError, LookupError):
    """A named dataset, job or task does not exist."""

    code = "NOT_FOUND"


class UnavailableError(ZmqDataError, ConnectionError):
    """A dispatcher or worker could not be reached within the retry budget."""

    code = "UNAVAILABLE"


class DeadlineExceededError(ZmqDataError, TimeoutError):
    """A wait ran past its deadline."""

    code = "DEADLINE_EXCEEDED"


class FailedPreconditionError(ZmqDataError):
    """The system is not in a state that allows the operation."""

    code = "FAILED_PRECONDITION"


class PermissionDeniedError(ZmqDataError, PermissionError):
    """Authentication failed."""

    code = "PERMISSION_DENIED"


_BY_CODE: dict[str, type[ZmqDataError]] = {
    cls.code: cls
    for cls in (
        ZmqDataError,
        InvalidArgumentError,
        NotFoundError,
        UnavailableError,
        DeadlineExceededError,
        FailedPreconditionError,
        PermissionDeniedError,
    )
}


def from_code(code: str, message: str) -> ZmqDataError:
    """Builds the error class named by ``code``; unknown codes give the base class."""
    return _BY_CODE.get(code, ZmqDataError)(message)


OP_NOTE = "zmqdata op: "
"""How a note on an exception names the op whose user function raised it
(``add_note``: a local traceback shows it too)."""
MAX_MESSAGE_CHARS = 2000
"""The most characters of an exception's own message sent on the wire ..."""
MAX_TRACEBACK_CHARS = 8000
"""... and of its traceback (the innermost frames kept)."""
_PACKAGE = str(Path(__file__).parent)


def in_op(error: BaseException, op: str) -> None:
    """Notes on ``error`` that ``op``'s user function raised it (the innermost op)."""
    notes = getattr(error, "__notes__", ())
    if not any(note.startswith(OP_NOTE) for note in notes):
        error.add_note(OP_NOTE + op)


def to_code(error: BaseException) -> tuple[str, str]:
    """Returns ``(code, message)`` for any exception, for sending on the wire.

    Exceptions that are not zmqdata errors (e.g. raised in user code) travel as
    ``INVALID_ARGUMENT``: the op that raised, the type, the message and the
    traceback, bounded (``MAX_MESSAGE_CHARS``, ``MAX_TRACEBACK_CHARS``).

    >>> code, text = to_code(KeyError("b"))
    >>> code, text
    ('INVALID_ARGUMENT', "KeyError: 'b'")
    >>> error = KeyError("b"); in_op(error, "map(parse)")
    >>> to_code(error)[1].splitlines()[0]
    "map(parse) raised KeyError: 'b'"
    """
    if isinstance(error, ZmqDataError):
        return error.code, error.message
    text = _cut(f"{type(error).__name__}: {error}", MAX_MESSAGE_CHARS, tail=False)
    ops = [n for n in getattr(error, "__notes__", ()) if n.startswith(OP_NOTE)]
    if ops:
        text = f"{ops[0].removeprefix(OP_NOTE)} raised {text}"
    if error.__traceback__ is not None:
        text += "\n\n" + _cut(_user_traceback(error), MAX_TRACEBACK_CHARS, tail=True)
    return InvalidArgumentError.code, text


def _user_traceback(error: BaseException) -> str:
    """``error``'s traceback, from its first frame outside zmqdata (if any)."""
    told = traceback.TracebackException.from_exception(error)
    frames = list(told.stack)
    first = next(
        (i for i, f in enumerate(frames) if not f.filename.startswith(_PACKAGE)), 0
    )
    told.stack = traceback.StackSummary.from_list(frames[first:])
    return "".join(told.format()).rstrip("\n")


def _cut(text: str, limit: int, tail: bool) -> str:
    """``text``, its ``limit`` last (``tail``) or first characters, saying how many were cut.

    >>> print(_cut("abcdef", 3, tail=True))
    [3 characters cut]
    def
    """
    if len(text) <= limit:
        return text
    cut = f"[{len(text) - limit} characters cut]"
    return f"{cut}\n{text[-limit:]}" if tail else f"{text[:limit]}\n{cut}"
