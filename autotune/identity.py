"""Typed identities of *what* is tuned and *where*: ``WorkloadId`` and ``TargetId``.

Tuning records (``records.py``) and the tuned-kernel cache (``cache.py``) store both as JSON
objects (``to_dict``) and read them back (``from_dict``); the cache key hashes them
(``cache.entry_key``). A workload is the algorithm (its workload key: a hash of the algorithm
IR, ``Pipeline.workload_key``) at concrete sizes, with its input shapes and dtypes; a target is
the backend and the machine its code runs on (``Backend.target_info``). See also: TVM's
``workload_key`` + ``Target`` pair that keys MetaSchedule's database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from tensorlang.func import Func
from tensorlang.pipeline import Pipeline

from .workloads import input_shapes, sizes_tag


@dataclass(frozen=True)
class WorkloadId:
    """An algorithm at concrete sizes.

    Attributes:
        name: a human name (the output Func's, or a built-in workload's).
        key: the workload key (SHA-256 hex of the algorithm IR).
        sizes: every size of the algorithm that was given, by name.
        shapes: input shapes by Input name. dtypes: input dtypes by Input name (NumPy names).
    """

    name: str
    key: str
    sizes: dict[str, int]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]

    @classmethod
    def of(cls, output: Func | Sequence[Func], sizes: dict[str, int],
           name: str | None = None) -> WorkloadId:
        """The workload of ``output`` at ``sizes``.

        Raises:
            ShapeError: the sizes do not fit the algorithm.
        """
        p = Pipeline(output)
        return cls(name or "+".join(o.name for o in p.outputs), p.workload_key(),
                   {k: int(sizes[k]) for k in p.sizes if k in sizes},
                   {k: tuple(v) for k, v in input_shapes(output, sizes).items()},
                   {i.name: i.dtype.numpy.name for i in p.inputs})

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "sizes": dict(self.sizes),
                "shapes": {k: list(v) for k, v in self.shapes.items()},
                "dtypes": dict(self.dtypes)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkloadId:
        """Raises: KeyError, TypeError or ValueError when ``d`` is malformed."""
        return cls(str(d["name"]), str(d["key"]),
                   {str(k): int(v) for k, v in d["sizes"].items()},
                   {str(k): tuple(int(x) for x in v) for k, v in d["shapes"].items()},
                   {str(k): str(v) for k, v in d["dtypes"].items()})

    def study_base(self) -> str:
        """``<name>-<key[:12]>-<sizes>``: the default Optuna study name of this workload."""
        return f"{self.name}-{self.key[:12]}-{sizes_tag(self.sizes)}"


@dataclass(frozen=True)
class TargetId:
    """Where tuned code runs: the backend and the machine (``Backend.target_info``).

    Attributes:
        backend: the backend's registry name (``"llvm-cpu"``; records older than the Backend
            interface have none and mean it). triple: LLVM target triple (tells backends
            apart). cpu: CPU (or device) name. features: LLVM feature string. llvm, llvmlite,
            tensorlang: versions. threads: hardware threads a parallel kernel uses.
        extra: fields a newer tensorlang wrote (kept and written back; not compared).
    """

    backend: str
    triple: str
    cpu: str
    features: str
    llvm: str
    llvmlite: str
    tensorlang: str
    threads: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    #: the fields the tuned-kernel cache keys on (code compiled for one target runs on another
    #: with these equal; the LLVM and tensorlang versions change the code itself)
    CACHE_FIELDS = ("triple", "cpu", "features", "llvm", "threads", "tensorlang")
    _FIELDS = ("backend", "triple", "cpu", "features", "llvm", "llvmlite", "tensorlang",
               "threads")

    def to_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self._FIELDS}, **self.extra}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TargetId:
        """Raises: TypeError or ValueError when ``d`` is malformed (an absent field is
        unknown: empty, or 0 threads)."""
        if not isinstance(d, dict):
            raise TypeError(f"a target is a JSON object, got {type(d).__name__}")
        return cls(str(d.get("backend") or "llvm-cpu"),
                   *(str(d.get(k) or "") for k in cls._FIELDS[1:-1]),
                   int(d.get("threads") or 0),
                   {k: v for k, v in d.items() if k not in cls._FIELDS})

    def cache_fields(self) -> dict[str, Any]:
        """The part of the target the cache key hashes."""
        return {k: getattr(self, k) for k in self.CACHE_FIELDS}

    def same_machine(self, other: TargetId) -> bool:
        """Whether code tuned for this target is valid and representative on ``other`` (same
        triple, CPU and features; versions and threads may differ)."""
        return (self.triple, self.cpu, self.features) == (other.triple, other.cpu,
                                                           other.features)
