"""The measuring process: ``python -m tensorlang.autotuner.worker``, driven over its stdin/stdout.

Started as a fresh interpreter (not ``multiprocessing``), so it never re-imports the user's main
script: ``tl.autotune`` works from a plain script, a notebook or the REPL. Protocol: 8-byte
little-endian length + pickle, both ways; the first message is the setup
``(role, backend, output, shapes, sizes, hook, arrays or None)`` (the ``Backend`` object); a ``"compile"`` worker then answers each
schedule trace with a ``MeasureResult`` holding object code; a ``"run"`` worker answers each
``("run", trace, object_code, signature, repeats, min_seconds, verify, budget)`` with a timed
``MeasureResult`` and each ``("compare", [(label, object_code, signature), ...], rounds, runs)``
with a ``CompareResult`` (interleaved blocks); ``None`` ends the process. The real stdout is kept for the
protocol and file descriptor 1 is pointed at stderr, so nothing printed (by Python or native code)
can corrupt it.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
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


def main() -> None:
    # Ctrl-C in a terminal reaches the whole process group: the tuner stops cleanly and closes
    # its workers; a worker must not die mid-answer with a traceback of its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    proto_in = sys.stdin.buffer
    from .measure import serve

    serve(lambda: recv(proto_in), lambda obj: send(proto_out, obj))


if __name__ == "__main__":
    main()
