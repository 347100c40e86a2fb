"""Every move of a job is checked: `jobs.lifecycle.transition` returns whether it won its compare-and-set, and no
module of the product drops that answer. A caller acts on a lost move — the worker's report is refused
(`leases.reported`), the decision is made again (`lifecycle.moved` inside `decided`), or the row is read again —
or says in a comment why losing is fine; a bare `transition(...)` statement fails this test, naming its line."""

from __future__ import annotations

import ast
from pathlib import Path

import optimize

SOURCE = Path(optimize.__file__).parent


def dropped_transitions(tree: ast.AST) -> list[int]:
    """The lines of `transition(...)` calls whose result is thrown away (a call standing as a statement)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            called = node.value.func
            name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", None)
            if name == "transition":
                lines.append(node.lineno)
    return lines


def test_no_module_drops_the_result_of_a_transition():
    dropped = [f"{path.relative_to(SOURCE)}:{line}" for path in sorted(SOURCE.rglob("*.py"))
               for line in dropped_transitions(ast.parse(path.read_text(), str(path)))]
    assert dropped == [], "check whether the move won (or say why losing it is fine): " + ", ".join(dropped)


def test_the_check_finds_a_dropped_transition_and_passes_a_checked_one():
    dropped = ast.parse("def f(s, r):\n    transition(s, RUN, r, P.FAILED)\n    lifecycle.transition(s, RUN, r, P.X)\n")
    checked = ast.parse("def f(s, r):\n    if not transition(s, RUN, r, P.FAILED):\n        return\n"
                        "    moved(transition(s, RUN, r, P.X), 'run')\n    return transition(s, RUN, r, P.Y)\n")
    assert dropped_transitions(dropped) == [2, 3]
    assert dropped_transitions(checked) == []
