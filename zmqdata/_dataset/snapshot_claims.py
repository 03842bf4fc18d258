"""A local writer's claim on a save: whose it is, and taking a dead one's over.

A local pass that writes a ``cache(filename)`` or a ``snapshot``
(``ops/cache_local.py``) claims its folder with ``snapshot.begin``, the
``SAVING`` marker naming this host and process. A pass that finds the folder
claimed writes nothing while that writer lives, and takes the folder over
once it is dead: a process of this host that has exited, or a writer of this
process that is gone (closed, or dropped unfinished). A marker of another
host, or one without a host (``distributed_save``, a service job's
snapshot), is live as far as a local pass can tell: remove the folder to have
it written anew.

>>> import tempfile
>>> class Writer: ...
>>> path, first, second = tempfile.mkdtemp(), Writer(), Writer()
>>> claim(path, first) is not None, claim(path, second)  # the first lives
(True, None)
>>> del first  # dropped unfinished: its claim is dead
>>> claim(path, second) is not None
True
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
import weakref
from typing import Any

from zmqdata._dataset import fs, snapshot
from zmqdata.errors import FailedPreconditionError

HOST = socket.gethostname()
"""The host a marker names: its process can be asked whether it lives."""

_LIVE: weakref.WeakValueDictionary[str, object] = weakref.WeakValueDictionary()
"""This process's writers by save id, while they live."""
_LOCK = threading.Lock()


def claim(path: str, writer: object) -> str | None:
    """A new save id under which ``writer`` writes ``path``; None if another writes it.

    None too where ``path`` holds a finished save. ``writer`` holds the claim
    while it lives (a weak reference: ``release`` it when done). A dead
    writer's claim is taken over, the chunks it left removed. Raises
    ``snapshot.begin``'s errors for a path that cannot be written.
    """
    save_id = uuid.uuid4().hex
    with _LOCK:
        _LIVE[save_id] = writer
    owner = {"host": HOST, "pid": os.getpid()}
    for _ in range(2):  # again once after taking a dead writer's claim over
        try:
            snapshot.begin(path, save_id, owner)
            return save_id
        except FailedPreconditionError:  # finished, or another writer's marker
            pass
        marker = snapshot.saving_marker(path)
        if marker is None or _alive(marker) or not _take_over(path, marker):
            break
    with _LOCK:
        _LIVE.pop(save_id, None)
    return None


def release(path: str, save_id: str) -> None:
    """Ends the claim ``save_id`` on ``path``: its marker removed if still there."""
    marker = snapshot.saving_marker(path)
    if marker is not None and marker.get("save_id") == save_id:
        fs.remove(fs.join(path, snapshot.SAVING))
    with _LOCK:
        _LIVE.pop(save_id, None)


def _alive(marker: dict[str, Any]) -> bool:
    """Whether the writer of ``marker`` may live (unless known dead, it may)."""
    host, pid, save_id = marker.get("host"), marker.get("pid"), marker.get("save_id")
    if host != HOST or type(pid) is not int or not _is_save_id(save_id):
        return True
    if pid == os.getpid():
        with _LOCK:
            return save_id in _LIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _is_save_id(value: Any) -> bool:
    return isinstance(value, str) and value.isascii() and value.isalnum()


def _take_over(path: str, dead: dict[str, Any]) -> bool:
    """Removes the dead writer's marker and chunks; False if another pass does.

    One pass takes a dead claim over: the one that makes its ``.taken``
    file, and finds the marker still the dead one's.
    """
    taking = fs.join(path, f"{snapshot.SAVING}.{dead['save_id']}.taken")
    try:
        with fs.writing(taking, exclusive=True):
            pass
    except FileExistsError:
        return False
    try:
        if snapshot.saving_marker(path) != dead:
            return False
        snapshot.remove_chunks(path)
        fs.remove(fs.join(path, snapshot.SAVING))
        return True
    finally:
        fs.remove(taking)
