"""doctor's findings (jobctl/ops/doctor_kinds.py): every kind the judge gives has its check,
its words and its fix; the kinds that only warn are kinds."""

from __future__ import annotations

import ast
import inspect

import pytest

from jobctl.ops import doctor, doctor_kinds, doctor_statements


def judged_kinds() -> set[str]:
    """The kinds the judge can give, read from its source: what it appends to its findings,
    returns as a list of them, or gives a ``Judged`` as its kinds."""
    tree = ast.parse(inspect.getsource(doctor_statements))
    lists: list[ast.AST] = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "append":
            found.update(a.value for a in node.args if isinstance(a, ast.Constant))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Judged":
            lists.extend(node.args[1:2])
        elif isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            if isinstance(value, ast.IfExp):
                lists.extend([value.body, value.orelse])
            elif isinstance(value, ast.Tuple) and value.elts:
                lists.append(value.elts[0])
            else:
                lists.append(value)
    for listed in lists:
        if isinstance(listed, (ast.List, ast.Tuple)):
            found.update(e.value for e in listed.elts if isinstance(e, ast.Constant))
    return found


def test_every_kind_the_judge_gives_has_its_words():
    """And no kind has words that nothing gives."""
    given = judged_kinds()
    assert given == doctor_kinds.KINDS.keys(), given ^ doctor_kinds.KINDS.keys()


@pytest.mark.parametrize("kind", sorted(doctor_kinds.KINDS))
def test_each_kind_names_a_check_of_the_checklist_and_a_fix(kind):
    check, wrong, fix = doctor_kinds.KINDS[kind]
    assert check in doctor.CHECKS
    assert wrong and fix and wrong == wrong.strip() and "\n" not in wrong


def test_the_kinds_that_only_warn_are_kinds():
    assert doctor_kinds.WARN_ONLY <= doctor_kinds.KINDS.keys()
