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
