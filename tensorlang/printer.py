"""Human-readable text of algorithm-IR expressions (used by ``str(expr)`` and the loop-nest printer)."""

from __future__ import annotations

from .expr import Access, BinOp, Call, Cast, Cmp, Const, Expr, Not, Reduce, Select, Size, Var

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
          "and": "and", "or": "or"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_PREC = {"or": 1, "and": 2, "cmp": 3, "add": 4, "sub": 4, "mul": 5, "div": 5, "floordiv": 5,
         "mod": 5}


def _prec(e: Expr) -> int:
    if isinstance(e, BinOp) and e.op in _PREC:
        return _PREC[e.op]
    if isinstance(e, Cmp):
        return _PREC["cmp"]
    if isinstance(e, Const) and isinstance(e.value, (int, float)) and e.value < 0:
        return 4
    return 10


def expr_str(e: Expr, load_name=None) -> str:
    """Render ``e``; ``load_name`` optionally renders other leaf node types (loop-nest IR loads)."""

    def go(n: Expr, parent: int = 0, right: bool = False) -> str:
        p = _prec(n)
        s = render(n)
        if p < parent or (right and p == parent and p < 10):
            return f"({s})"
        return s

    def render(n: Expr) -> str:
        if isinstance(n, Const):
            if n.dtype.is_float:
                v = repr(float(n.value))
                return v + ("f" if n.dtype.name == "float32" else "")
            return str(n.value)
        if isinstance(n, (Var, Size)):
            return n.name
        if isinstance(n, BinOp):
            if n.op in ("max", "min"):
                return f"{n.op}({go(n.a)}, {go(n.b)})"
            p = _PREC[n.op]
            return f"{go(n.a, p)} {_INFIX[n.op]} {go(n.b, p, right=True)}"
        if isinstance(n, Cmp):
            p = _PREC["cmp"]
            return f"{go(n.a, p + 1)} {_CMP[n.op]} {go(n.b, p + 1)}"
        if isinstance(n, Not):
            return f"~{go(n.a, 10)}"
        if isinstance(n, Call):
            if n.name == "neg":
                return f"-{go(n.args[0], 10)}"
            return f"{n.name}({', '.join(go(a) for a in n.args)})"
        if isinstance(n, Select):
            return f"where({go(n.cond)}, {go(n.t)}, {go(n.f)})"
        if isinstance(n, Cast):
            return f"{n.dtype.value}({go(n.value)})"
        if isinstance(n, Access):
            name = n.name
            if n.boundary is not None:
                extra = "" if n.boundary.value is None else f", {render(n.boundary.value)}"
                name = f"{n.boundary.kind}({n.name}{extra})"
            return f"{name}[{', '.join(go(i) for i in n.indices)}]"
        if isinstance(n, Reduce):
            return f"{n.op}({go(n.value)})"
        if load_name is not None:
            return load_name(n, go)
        return f"<{type(n).__name__}>"

    return go(e)
