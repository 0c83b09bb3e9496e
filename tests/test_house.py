"""The house rules a newcomer relies on (issue 29): README is a front door, a module fits on a
few screens, a function on one."""

import ast

from conftest import REPO


def test_readme_is_a_front_door_under_300_lines():
    assert len((REPO / "README.md").read_text().splitlines()) < 300


def test_no_module_over_400_lines_and_no_function_of_the_engine_over_60():
    long_modules, long_functions = [], []
    for folder in ("suite", "tasks", "models"):
        for path in sorted((REPO / folder).rglob("*.py")):
            source = path.read_text()
            if len(source.splitlines()) > 400:
                long_modules.append(path.relative_to(REPO))
            for node in ast.walk(ast.parse(source)):
                if folder == "suite" and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    if node.end_lineno - node.lineno + 1 > 60:
                        long_functions.append(f"{path.relative_to(REPO)}:{node.name}")
    assert long_modules == [] and long_functions == []
