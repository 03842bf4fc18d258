"""Every test asserts something: a test that only runs code proves little.

A ``test_*`` function passes this check if its body (nested functions
included) has an ``assert``, a ``pytest.raises``/``pytest.warns``, a
``poll_for(...)`` (which fails when its predicate stays false), or a call to a
helper named ``assert_*``, ``check*`` or ``expect*``, or to a helper of the
test suite that itself passes this check (``fails_fast``, ``round_trip``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).parent
CHECKING_CALLS = frozenset({"raises", "warns", "poll_for"})
CHECKING_PREFIXES = ("assert_", "check", "expect")

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _called_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def asserts(function: Function, helpers: frozenset[str] = CHECKING_CALLS) -> bool:
    """Whether ``function`` checks anything; ``helpers``: names of checking calls.

    >>> tree = ast.parse("def test_a():\\n    x = 1\\ndef test_b():\\n    assert 1")
    >>> [asserts(f) for f in tree.body]
    [False, True]
    """
    for node in ast.walk(function):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            name = _called_name(node)
            if name in helpers or name.startswith(CHECKING_PREFIXES):
                return True
    return False


def defined_tests(tree: ast.Module) -> Iterator[Function]:
    """The ``test_*`` functions of a module, at top level or in classes."""
    for node in tree.body:
        members = node.body if isinstance(node, ast.ClassDef) else [node]
        for member in members:
            if isinstance(member, Function) and member.name.startswith("test_"):
                yield member


def checking_helpers(functions: list[Function]) -> frozenset[str]:
    """Names of the helpers that check, directly or through other helpers."""
    found = CHECKING_CALLS
    while True:
        more = found | {f.name for f in functions if asserts(f, found)}
        if more == found:
            return found
        found = more


def silent_tests(root: Path = TESTS) -> list[str]:
    """``path:line name`` of every test under ``root`` that asserts nothing."""
    trees = {path: ast.parse(path.read_text()) for path in sorted(root.rglob("*.py"))}
    helpers = checking_helpers(
        [
            f
            for tree in trees.values()
            for f in ast.walk(tree)
            if isinstance(f, Function)
        ]
    )
    return [
        f"{path.relative_to(root)}:{test.lineno} {test.name}"
        for path, tree in trees.items()
        if path.name.startswith("test_")
        for test in defined_tests(tree)
        if not asserts(test, helpers)
    ]


def test_every_test_asserts_something() -> None:
    assert silent_tests() == []


def test_the_check_finds_a_test_without_an_assertion(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "def test_runs_only():\n    print(1)\n"
        "def test_raises():\n    with pytest.raises(ValueError):\n        int('x')\n"
        "def test_helper():\n    check_round_trip(1)\n"
        "class TestGroup:\n    def test_in_class(self):\n        pass\n"
        "def helper_not_a_test():\n    pass\n"
        "def same(x):\n    assert x\n"
        "def test_through_a_helper():\n    same(1)\n"
    )
    assert silent_tests(tmp_path) == [
        "test_sample.py:2 test_runs_only",
        "test_sample.py:10 test_in_class",
    ]
