"""The house rules a newcomer relies on: the project stands on its own. (Line caps on README, modules and
functions were dropped: they were met by reflowing prose and joining lines; cohesion is a judgment.)"""

from conftest import REPO


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


# suite/__init__.py's map, top to bottom: a wing imports only the wings above it (or its own).
WINGS = ["errors", "specs", "results", "engine", "components", "leaderboard", "launch", "probes", "bench", "commands"]
SAME = {"cache": "errors", "tasks": "components", "models": "components", "cli": "commands"}
# A task names the runner it brings, whose code lives in its own wing: imported when a probe runs.
ALLOWED = {("tasks/number_probe.py", "suite.probes.runner")}


def test_a_wing_imports_only_the_wings_above_it():
    import ast

    rank = {wing: i for i, wing in enumerate(WINGS)} | {name: WINGS.index(wing) for name, wing in SAME.items()}
    upward = []
    for path in sorted([*REPO.joinpath("suite").rglob("*.py"), *REPO.joinpath("tasks").rglob("*.py"),
                        *REPO.joinpath("models").rglob("*.py")]):  # fmt: skip
        parts = path.relative_to(REPO).with_suffix("").parts
        wing = parts[1] if parts[0] == "suite" else parts[0]
        if wing not in rank:  # the package's face (__init__, __main__) and its build backend
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"suite.{a.name}" for a in node.names] if node.module == "suite" else [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                target = name.split(".")[1] if name.startswith("suite.") and "." in name else None
                where = path.relative_to(REPO).as_posix()
                if target in rank and rank[target] > rank[wing] and (where, name) not in ALLOWED:
                    upward.append(f"{where}:{node.lineno} imports {name}")
    assert upward == []
