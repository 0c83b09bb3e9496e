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


def test_the_project_stands_on_its_own_no_tracked_file_cites_a_folder_outside_it():
    import subprocess

    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    citing = [
        name
        for name in tracked.splitlines()
        if not name.startswith("leaderboards/") or name.count("/") < 3  # run folders hold specs, not prose
        if (REPO / name).is_file() and "/".join(("..", "shared")) in (REPO / name).read_text(errors="ignore")
    ]
    assert citing == []
