"""The measuring process: ``python -m tensorlang.autotuner.worker``, driven over its stdin/stdout.

Started as a fresh interpreter (not ``multiprocessing``), so it never re-imports the user's main
script: ``tl.autotune`` works from a plain script, a notebook or the REPL. It speaks the protocol
of ``protocol.py`` and runs ``measure.serve``; when the tuner disappears (SIGKILL) the worker
sees its pipe close and exits silently. The real stdout is kept for the protocol and file
descriptor 1 is pointed at stderr, so nothing printed (by Python or native code) can corrupt it.
"""

from __future__ import annotations

import os
import signal
import sys

from .protocol import recv, send


def main() -> None:
    # Ctrl-C in a terminal reaches the whole process group: the tuner stops cleanly and closes
    # its workers; a worker must not die mid-answer with a traceback of its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    proto_in = sys.stdin.buffer
    from .measure import serve  # imported after the redirection: nothing it prints gets through

    try:
        serve(lambda: recv(proto_in), lambda obj: send(proto_out, obj))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        # the tuner is gone (killed, or its process ended without closing us): nothing to
        # report to, and nobody to read a traceback about it
        os._exit(0)


if __name__ == "__main__":
    main()
