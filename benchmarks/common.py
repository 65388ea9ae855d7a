"""Helpers shared by the benchmarks: ``median_seconds`` (the package's, ``autotune.measure``) and a
plain-text table; the lines of interleaved times against NumPy; the host CPU's name; which BLAS
NumPy calls, and with which kernels; ``rule_settings``, the rule-based schedule's constants set
for one call (A/B of a rule against its variant in one process)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator

from tensorlang.autotuner.measure import median_seconds

__all__ = ["cpu_name", "median_seconds", "numpy_blas", "print_vs_numpy", "rule_settings", "table"]


@contextlib.contextmanager
def rule_settings(settings: str) -> Iterator[None]:
    """Set module constants while the block runs, then restore them: ``NAME=VALUE`` joined by
    ``+``; ``NAME`` is ``tensorlang.autotuner.heuristic``'s, ``MODULE.NAME`` another module's of
    ``tensorlang.autotuner`` (``cpu_model.MAX_ACCUMULATORS=24``) and a ``MODULE`` starting with
    ``tensorlang.`` that module (``tensorlang.schedule.promote.MAX_TILE_ELEMENTS=512``); VALUE is
    converted to the constant's type (a tuple's items separated by commas:
    ``update_order.JAM_TILE=8,1``).

    Raises:
        AttributeError: a constant that does not exist (a misspelt name sets nothing).
    """
    sets = dict(a.split("=", 1) for a in settings.split("+") if a)
    where = {}
    for n in sets:
        mod, _, attr = n.rpartition(".")
        if not mod.startswith("tensorlang."):
            mod = "tensorlang.autotuner." + (mod or "heuristic")
        where[n] = (importlib.import_module(mod), attr)
    keep = {n: getattr(*where[n]) for n in sets}
    try:
        for n, value in sets.items():
            old = keep[n]
            setattr(*where[n], tuple(type(old[0])(v) for v in value.split(",") if v)
                    if isinstance(old, tuple) and old else type(old)(value))
        yield
    finally:
        for n, value in keep.items():
            setattr(*where[n], value)


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
