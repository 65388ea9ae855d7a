"""Helpers shared by the benchmarks: ``median_seconds`` (the package's, ``autotune.measure``) and a
plain-text table; the lines of interleaved times against NumPy; the host CPU's name; which BLAS
NumPy calls, and with which kernels; ``rule_settings``, the rule-based schedule's constants set
for one call (A/B of a rule against its variant in one process)."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator

from tensorlang.autotuner.measure import median_seconds

__all__ = ["cpu_name", "median_seconds", "numpy_blas", "print_vs_numpy", "rule_settings", "table"]


@contextlib.contextmanager
def rule_settings(settings: str) -> Iterator[None]:
    """Set module constants while the block runs, then restore them: ``NAME=VALUE`` joined by
    ``+``; ``NAME`` is ``tensorlang.autotuner.heuristic``'s (or, where it has none, the one
    module of ``tensorlang.autotuner`` that has it: ``update_rules``'s ``UPDATE_MIN_BYTES``),
    ``MODULE.NAME`` another module's of ``tensorlang.autotuner`` (``cpu_model.MAX_ACCUMULATORS=24``)
    and a ``MODULE`` starting with ``tensorlang.`` that module
    (``tensorlang.schedule.promote.MAX_TILE_ELEMENTS=512``). A rules module's constant is set
    in every module of ``tensorlang.autotuner`` that imported it too (``heuristic`` imports
    ``update_rules``'s ``UPDATE_MIN_VECTORS``, ``rfactor_rules``'s ``MIN_PARALLEL_POINTS``), so
    each rule reads the new value. VALUE is converted to the constant's type (a tuple's items
    separated by commas: ``update_order.JAM_TILE=8,1``).

    Raises:
        AttributeError: a constant that does not exist (a misspelt name sets nothing), or a
            bare NAME that several modules other than ``heuristic`` define differently.
    """
    sets = dict(a.split("=", 1) for a in settings.split("+") if a)
    where = {n: _places(n) for n in sets}
    keep = {n: getattr(*where[n][0]) for n in sets}
    try:
        for n, value in sets.items():
            old = keep[n]
            new = tuple(type(old[0])(v) for v in value.split(",") if v) \
                if isinstance(old, tuple) and old else type(old)(value)
            for place in where[n]:
                setattr(*place, new)
        yield
    finally:
        for n, value in keep.items():
            for place in where[n]:
                setattr(*place, value)


def _places(name: str) -> list[tuple[object, str]]:
    """(module, attribute) pairs that ``rule_settings`` sets for ``name``: the constant's own
    module first, then every loaded module of ``tensorlang.autotuner`` holding the same object
    under that name (its ``from ... import`` copies)."""
    mod, _, attr = name.rpartition(".")
    if mod.startswith("tensorlang."):
        return [(importlib.import_module(mod), attr)]
    home = importlib.import_module("tensorlang.autotuner." + (mod or "heuristic"))
    rules = [m for n, m in sorted(sys.modules.items())
             if n.startswith("tensorlang.autotuner.") and m is not None and hasattr(m, attr)]
    if not mod and not hasattr(home, attr):
        owners = {id(getattr(m, attr)): m for m in rules}
        if len(owners) > 1:
            raise AttributeError(f"{attr} is defined differently in "
                                 f"{', '.join(m.__name__ for m in rules)}: name the module")
        home = next(iter(owners.values()), home)
    value = getattr(home, attr)  # (AttributeError: no such constant)
    return [(home, attr)] + [(m, attr) for m in rules if m is not home
                             and getattr(m, attr) is value]


def table(rows: list[tuple], head: tuple[str, ...]) -> str:
    """A plain-text table."""
    cols = list(zip(head, *rows))
    widths = [max(len(str(c)) for c in col) for col in cols]
    line = "  ".join(str(h).rjust(w) if k else str(h).ljust(w) for k, (h, w) in
                     enumerate(zip(head, widths)))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(str(c).rjust(w) if k else str(c).ljust(w) for k, (c, w) in
                             enumerate(zip(r, widths))))
    return "\n".join(out)


def print_vs_numpy(case: str, times: dict[str, list[float]]) -> None:
    """One line per contender of ``times`` (label -> raw times in seconds, one label
    ``"numpy"``): median in ms, IQR / median, NumPy's median over this one, and n."""
    from tensorlang.autotuner.timing import Stats

    base = Stats.of(times["numpy"]).median
    for label, ts in times.items():
        st = Stats.of(ts)
        print(f"  {case:<14} {label:<22} {st.median * 1e3:10.3f} ms  IQR "
              f"{st.iqr / st.median:5.1%}  NumPy/this {base / st.median:6.2f}x  (n={st.n})",
              flush=True)


def cpu_name() -> str:
    """The host CPU's model name (``/proc/cpuinfo``, else what ``platform`` says) with LLVM's
    name for it and its widest SIMD extension: "AMD EPYC (znver4, AVX-512)". A hypervisor may
    report one model name for different CPUs; the LLVM name and ISA tell them apart."""
    import platform

    name = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from tensorlang.backends.llvm.target import host_target

    t = host_target()
    isa = "AVX-512" if t.has_avx512 else "AVX2" if "+avx2" in t.features else "SSE"
    return f"{name} ({t.cpu}, {isa})"


def numpy_blas() -> str:
    """The BLAS library behind NumPy's matmul, its version and the kernel set it picked for this
    CPU ("OpenBLAS 0.3.31, Haswell kernels"), from ``threadpoolctl`` (installed with
    scikit-learn). OpenBLAS picks its kernels by CPU model at load time, and a CPU newer than the
    build gets an older kernel set (on Zen 5, 0.3.31 picks its AVX2 Haswell kernels; the
    environment variable ``OPENBLAS_CORETYPE=SkylakeX`` selects the AVX-512 ones): a ratio
    against NumPy means little without it."""
    try:
        import numpy as np  # noqa: F401  (loads the BLAS)
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown BLAS"
    for info in threadpool_info():
        if info.get("user_api") == "blas":
            name = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS"}.get(
                info.get("internal_api", ""), info.get("internal_api", "BLAS"))
            arch = info.get("architecture")
            return f"{name} {info.get('version', '')}" + (f", {arch} kernels" if arch else "")
    return "unknown BLAS"
