"""Objects many tasks carry, pickled once in the command and loaded once in each worker.

Every pipeline pair handed to a worker carries the network's stack of layers (gpt3-175b's: about
95 KB pickled, 9 ms to pickle on the 2-core development VM, once per pair and again per ZeRO
stage). :class:`Shared` keeps the pickled bytes of each object the caller names as shared, under
a token: a task's pickle names such an object by its token and bytes (``persistent_id``), copied,
not pickled again, and a worker loads each token's object once (:func:`loads`), then hands the
same object to every later task that names it, as one process does. The command keeps the last
:data:`KEPT` objects' bytes (each object held, so its ``id`` is not reused while kept); a worker
keeps as many loaded objects. A shared object is sent as it stood when first named: only objects
that never change (frozen, as a stack of layers is) are named.
"""

from __future__ import annotations

import io
import pickle
import uuid
from multiprocessing.reduction import ForkingPickler
from typing import Any, Iterable

#: objects whose pickled bytes the command keeps, and whose loaded objects a worker keeps
KEPT = 4

#: in a worker process, the objects loaded so far by token, oldest first
_LOADED: dict[str, Any] = {}


class Shared:
    """The command's pickled bytes of shared objects, by the object's ``id`` (module docstring)."""

    def __init__(self):
        self._by_id: dict[int, tuple[str, bytes, Any]] = {}

    def named(self, objects: Iterable[Any]) -> dict[int, tuple[str, bytes]]:
        """``{id: (token, bytes)}`` of ``objects``, each pickled on its first naming only."""
        named = {}
        for obj in objects:
            got = self._by_id.get(id(obj))
            if got is None or got[2] is not obj:
                got = (uuid.uuid4().hex, bytes(ForkingPickler.dumps(obj)), obj)
                self._by_id[id(obj)] = got
                while len(self._by_id) > KEPT:
                    del self._by_id[next(iter(self._by_id))]
            named[id(obj)] = got[:2]
        return named


class _Pickler(ForkingPickler):
    def __init__(self, file, named: dict[int, tuple[str, bytes]]):
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.named = named

    def persistent_id(self, obj):
        return self.named.get(id(obj)) if self.named else None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        token, blob = pid
        if token not in _LOADED:
            _LOADED[token] = pickle.loads(blob)
            while len(_LOADED) > KEPT:
                del _LOADED[next(iter(_LOADED))]
        return _LOADED[token]


def dumps(obj: Any, named: dict[int, tuple[str, bytes]]) -> bytes:
    """``obj`` pickled as :class:`multiprocessing.reduction.ForkingPickler` does, each object of
    ``named`` (:meth:`Shared.named`) by its token and bytes."""
    buffer = io.BytesIO()
    _Pickler(buffer, named).dump(obj)
    return buffer.getvalue()


def loads(blob: bytes) -> Any:
    """What :func:`dumps` pickled, each shared object loaded once in this process."""
    return _Unpickler(io.BytesIO(blob)).load()
