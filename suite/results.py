"""Which runner wrote a result.json: the training loop, or a task's own runner (a probe).

Every result.json records its runner under "runner": "train" for the training loop, the
runner's registered name otherwise (the number probes' is "probe"). Files written before the
field existed are told apart by their spec, since only a trained run's spec has a "train"
block. Readers of results (the CLI's summaries, the backends, the leaderboards) dispatch on
this one function instead of probing for fields.
"""

from __future__ import annotations

TRAIN = "train"


def runner_of(result: dict) -> str:
    if "runner" in result:
        return result["runner"]
    spec = result.get("spec")
    return TRAIN if isinstance(spec, dict) and "train" in spec else "probe"
