"""The README's Python snippets run as written, in order, in one namespace (each builds on the
ones before it, as a reader types them). The tuning snippet is run with its effort scaled down
(fewer trials, smaller sizes, its log in a temporary folder): what it shows — the calls and
their arguments — is checked, not the minutes it would take."""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (what the README writes, what the test runs instead) for the slow parts of a snippet
SCALE_DOWN = (("trials=40", "trials=2"), ('"M": 512, "N": 512, "K": 512', '"M": 24, "N": 40, "K": 8'))


def snippets() -> list[tuple[int, str]]:
    """(line number, source) of every top-level ```python block of README.md (indented blocks
    inside lists are fragments of a larger definition and are not run)."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def test_the_readme_has_its_snippets():
    # the checker itself: a README without runnable snippets would pass the test below vacuously
    found = snippets()
    assert len(found) >= 3 and "tl.compile(C)" in found[0][1]
    assert any("tl.autotune" in src for _, src in found)


def test_readme_snippets_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the tuning snippet writes tuning_logs/matmul.jsonl
    (tmp_path / "tuning_logs").mkdir()
    namespace: dict = {"__name__": "readme"}
    for line, src in snippets():
        for slow, fast in SCALE_DOWN:
            src = src.replace(slow, fast)
        try:
            exec(compile(src, f"README.md:{line}", "exec"), namespace)  # noqa: S102
        except Exception as exc:  # noqa: BLE001 - name the snippet that failed
            pytest.fail(f"the README snippet at line {line} failed: {type(exc).__name__}: {exc}")
    assert (tmp_path / "tuning_logs" / "matmul.jsonl").stat().st_size > 0
    assert "llvm-cpu" in capsys.readouterr().out
