"""The measuring processes' protocol (``worker.py``, ``measure.py``): messages are 8-byte
little-endian length + pickle, both ways. The first message is the setup
``(role, backend, output, shapes, sizes, hook, arrays or None)`` (``backend``: the ``Backend``
object). A ``"compile"`` worker then answers each schedule trace with a ``MeasureResult``
holding object code; a ``"run"`` worker answers each ``("run", trace, object_code, signature,
repeats, min_seconds, verify, budget)`` with a timed ``MeasureResult`` and each
``("compare", [(label, object_code, signature), ...], rounds, runs)`` with a ``CompareResult``
(interleaved blocks); ``None`` ends the process.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, BinaryIO


def send(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def recv(stream: BinaryIO) -> Any:
    head = _read(stream, 8)
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(_read(stream, n))


def _read(stream: BinaryIO, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        buf += chunk
    return buf
