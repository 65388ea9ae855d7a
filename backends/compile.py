"""The backends' compile entry: algorithm + schedule -> a callable ``Kernel`` through the backend
named (``backends.base.get_backend``; default: the LLVM CPU backend). ``tl.compile`` (the public
entry point, ``tensorlang/__init__.py``) calls it, and resolves ``schedule="auto"`` through the
autotuner first: this layer never imports the tuner."""

from __future__ import annotations

from typing import Any

from tensorlang.func import Func

from .base import get_backend
from .kernel import Kernel


def compile(output: Func, schedule: Any = None, *, backend: str | None = None,  # noqa: A001
            target: Any = None, opt_level: int = 3, check: bool = True,
            emit_object: bool = False) -> Kernel:
    """Compile ``output`` under ``schedule`` (a ``tl.Schedule``, or None: the default schedule)
    with ``backend`` (a registered name; default ``"llvm-cpu"``) for ``target`` (default: the
    backend's host target). Arguments, result and errors are ``tl.compile``'s
    (``tensorlang/__init__.py``, which documents them), less ``schedule="auto"``, which
    ``tl.compile`` resolves before calling this; ``Backend.compile`` does the work.
    """
    return get_backend(backend).compile(output, schedule, target=target, opt_level=opt_level,
                                        check=check, emit_object=emit_object)
