"""The number-probe runner (arXiv 2502.16147): hidden states of every layer, then per-layer fits.

For each run (prompt set) and data set (numbers, letters), the state of the read token at every
layer (layer 0 = the embedding output, layer L = the output of block L, as hidden_states is
indexed in the paper's code), and per layer:

- pca_ev:  explained variance ratio of a 1-component PCA;
- rho:     |Spearman(value, PC1)|; rho_within: the same inside each group, averaged (order
           finer than the group: knowing only the group already gives rho ~0.97 here);
- beta:    exp(slope) of a linear fit of log|Delta_k| on k, Delta_k the gap between the PC1
           means of consecutive groups (~1 log-like, ~10 linear, < 1 compressed);
- pls_r2:  R^2 of a 1-component PLS regression on the value; pls_rho and pls_beta the same
           measures on the PLS component (the paper's PLS rows).

Mean and std over the runs per layer; the best layer by EV (the paper's PCA row), by R^2 (its
PLS row), and by EV among the layers whose PC1 orders the values (rho >= min_rho). Written to
the run folder: result.json (last), probe.csv, probe_layers.png, probe_pc1.png.

result.json holds `numbers` and `letters`, each with `layers` (per layer `pca_ev`, `pls_r2`,
`rho`, `beta`, `rho_within`, `pls_rho`, `pls_beta`, each `{mean, std}`), `best` and
`tokens_read`; probe.csv is the same table, probe_layers.png the per-layer curves (numbers and
letters), probe_pc1.png PC1 against the value at the best layer.

How to read it. `best` names three layers, because the paper's rule alone misleads on small
models: `by_ev` (highest EV: the paper's PCA row), `by_r2` (highest R^2: its PLS row) and
`by_ev_ordered` (highest EV among the layers whose PC1 orders the values, rho >= `min_rho`, 0.9).
On SmolLM2 and MiniLM the highest-EV layer is the first one, whose PC1 does not order the values
at all (rho 0.04 and 0.25). Read rho beside any best layer, and rho_within beside rho: the group
alone already gives rho ~0.97 on this design. The letters control is confounded by string
length, so compare numbers and letters on EV and R^2.

The model's settings are passed to from_pretrained and so recorded in the spec
(models/pretrained.py): `dtype` (float32, the default and what the probes have always read,
float16 or bfloat16), `device_map` (e.g. auto: accelerate places the layers on the GPUs and, if
they do not fit, the CPU; --device then only says where prompts and hidden states live), and
for `hf` also `revision` (a hub branch, tag or commit) and `trust_remote_code` (off: a model
whose repository brings its own Python code is refused in one line until you set it), e.g.
`--model hf --set path=org/model --set revision=v1.0 --set dtype=bfloat16 --set device_map=auto`.

`threads`: torch threads for the model, by default torch's own count (every core, or
OMP_NUM_THREADS); the hidden states come out bit for bit the same with any count. Beside other
jobs set threads=1 or OMP_WAIT_POLICY=PASSIVE: a second thread busy-waiting beside another
process made SmolLM2 ~4x slower. The fits always use one BLAS thread, and PCA the exact SVD, so
a probe's numbers repeat exactly.

A GGUF model (SmolLM2) is de-quantized once into a float32 copy under $SUITE_CACHE (default
~/.cache/grokking-suite/gguf/, 540 MB; suite/cache.py): transformers' GGUF reader took ~25-35 s
at every load on 2 cores, the copy loads in under a second and gives the same hidden states.
"""

from __future__ import annotations

import csv
import inspect
import io
import math
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr
from sklearn.cross_decomposition import PLSRegression
from sklearn.decomposition import PCA
from threadpoolctl import threadpool_limits

import suite
from suite.results.result import git_commit, git_dirty, machine
from suite.results.rundir import RunDir, write_atomic, write_json
from suite.specs.spec import component_settings, spec_id, task_data

METRICS = ("pca_ev", "pls_r2", "rho", "beta", "rho_within", "pls_rho", "pls_beta")


# --- hidden states ---------------------------------------------------------------------------


@torch.no_grad()
def extract(pretrained, prompts: list[str], *, batch_size: int, read: str, device) -> tuple[np.ndarray, list[str]]:
    """States of the read token at every layer, (layers+1, prompts, width), and the tokens read.

    Batches are padded on the left; the attention mask hides the padding and the position ids
    are rebuilt from it, so every prompt sees the positions it would see alone. read="equals"
    reads the last real token (the prompt's final '='; for an encoder the token before [SEP]),
    read="last" the last position whatever it is ([SEP] for an encoder, as the paper's code).
    """
    tokenizer, model = pretrained.tokenizer, pretrained.model
    takes = inspect.signature(model.forward).parameters
    # No key-value cache: nothing is generated, and building it cost ~8% of the extraction.
    no_cache = {"use_cache": False} if "use_cache" in takes else {}
    chunks, tokens_read = [], []
    for start in range(0, len(prompts), batch_size):
        enc = tokenizer(
            prompts[start : start + batch_size], return_tensors="pt", padding=True, return_special_tokens_mask=True
        )
        special = enc.pop("special_tokens_mask")
        mask = enc["attention_mask"]
        if "position_ids" in takes:
            enc["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(**{k: v.to(device) for k, v in enc.items()}, output_hidden_states=True, **no_cache)
        positions = torch.arange(mask.shape[1])
        if read == "last":
            index = torch.full((len(mask),), mask.shape[1] - 1)
        else:
            index = (positions * mask * (1 - special)).argmax(-1)  # the last real, non-special token
        rows = torch.arange(len(mask))
        chunks.append(torch.stack([h[rows, index.to(h.device)].float().cpu() for h in out.hidden_states]))
        tokens_read += tokenizer.convert_ids_to_tokens(enc["input_ids"][rows, index].tolist())
    return torch.cat(chunks, 1).numpy(), tokens_read


# --- per-layer measures ----------------------------------------------------------------------


def abs_spearman(values: np.ndarray, scores: np.ndarray) -> float:
    if np.ptp(values) == 0 or np.ptp(scores) == 0:
        return math.nan
    return float(abs(spearmanr(values, scores).statistic))


def within_group_rho(values: np.ndarray, scores: np.ndarray, groups: np.ndarray) -> float:
    rhos = [abs_spearman(values[groups == g], scores[groups == g]) for g in np.unique(groups)]
    rhos = [r for r in rhos if not math.isnan(r)]
    return float(np.mean(rhos)) if rhos else math.nan


def scaling_rate(scores: np.ndarray, groups: np.ndarray) -> float:
    """beta = exp(slope of log|Delta_k| on k = 1..G-1), Delta_k between consecutive group means."""
    means = [scores[groups == g].mean() for g in np.unique(groups)]  # groups in increasing order
    gaps = np.clip(np.abs(np.diff(means)), 1e-8, None)
    if len(gaps) < 2:
        return math.nan
    slope = np.polyfit(np.arange(1, len(gaps) + 1), np.log(gaps), 1)[0]
    return float(np.exp(slope))


def layer_measures(states: np.ndarray, values: np.ndarray, groups: np.ndarray) -> tuple[dict, np.ndarray]:
    """The measures of one layer's states (prompts x width), and its PC1 scores."""
    if states.var(0).sum() <= states.shape[1] * (1e-5 * float(np.abs(states).max())) ** 2:
        # Every prompt has the same state up to float32 rounding (the '=' embedding of a causal
        # LM, layer 0): there is nothing to fit, and PLS would divide by zero.
        return {m: math.nan for m in METRICS}, np.zeros(len(states))
    # "full": the exact SVD. The default picks a randomized solver here, unseeded, which moved the 6th
    # decimal of EV and beta from one run of the same states to the next.
    pc1 = PCA(n_components=1, svd_solver="full").fit(states)
    scores = pc1.transform(states)[:, 0]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # near-constant columns: sklearn warns, the fit stands
            pls = PLSRegression(n_components=1).fit(states, values)
            pls_scores = pls.transform(states)[:, 0]
            r2 = float(pls.score(states, values))
    except (ValueError, np.linalg.LinAlgError):  # a degenerate layer: no PLS measures, the rest stand
        pls_scores, r2 = np.full(len(states), np.nan), math.nan
    return {
        "pca_ev": float(pc1.explained_variance_ratio_[0]),
        "pls_r2": r2,
        "rho": abs_spearman(values, scores),
        "beta": scaling_rate(scores, groups),
        "rho_within": within_group_rho(values, scores, groups),
        "pls_rho": abs_spearman(values, pls_scores),
        "pls_beta": scaling_rate(pls_scores, groups),
    }, scores


def _clean(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 6)


def summarize(per_run: list[list[dict]]) -> list[dict]:
    """Per layer: each measure's mean and std over the runs (NaN-aware; null when undefined)."""
    layers = []
    for layer in range(len(per_run[0])):
        row = {"layer": layer}
        for m in METRICS:
            vals = np.array([run[layer][m] for run in per_run], dtype=float)
            ok = vals[~np.isnan(vals)]
            row[m] = {"mean": _clean(ok.mean()) if len(ok) else None, "std": _clean(ok.std()) if len(ok) else None}
        layers.append(row)
    return layers


def best_layers(layers: list[dict], min_rho: float) -> dict:
    def best(key, among):
        among = [r for r in among if r[key]["mean"] is not None]
        return max(among, key=lambda r: r[key]["mean"]) if among else None

    ordered = [r for r in layers if r["rho"]["mean"] is not None and r["rho"]["mean"] >= min_rho]
    return {
        "by_ev": best("pca_ev", layers),
        "by_r2": best("pls_r2", layers),
        "by_ev_ordered": best("pca_ev", ordered),
        "min_rho": min_rho,
    }


# --- outputs ---------------------------------------------------------------------------------


def write_csv(path: Path, tables: dict[str, list[dict]]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["data", "layer"] + [f"{m}_{s}" for m in METRICS for s in ("mean", "std")])
    for name, layers in tables.items():
        for row in layers:
            writer.writerow(
                [name, row["layer"]]
                + ["" if row[m][s] is None else row[m][s] for m in METRICS for s in ("mean", "std")]
            )
    write_atomic(path, buf.getvalue())


def _fmt(row: dict | None) -> str:
    if row is None:
        return "none"
    get = lambda m: "nan" if row[m]["mean"] is None else f"{row[m]['mean']:.2f}"  # noqa: E731
    return f"layer {row['layer']} (EV {get('pca_ev')}, R2 {get('pls_r2')}, rho {get('rho')}, beta {get('beta')})"


def run_probe(spec: dict, run_dir: Path, device: torch.device) -> dict:
    """Probe one spec into run_dir; every check (and the model load) happens before any file is written."""
    t0 = time.monotonic()
    data, model_entry = task_data(spec)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(data.threads or threads_before)  # the hidden states come out the same for any count
    try:
        return _probe(spec, run_dir, device, data, model_entry, t0)
    finally:
        torch.set_num_threads(threads_before)


def _measure_series(pretrained, data, name: str, device):
    """One data set (numbers or letters) over the probe's runs: per run, each layer's measures; the
    tokens read; the first run's values, groups and PC1 scores (for its plot); seconds spent
    extracting and fitting; the hidden width."""
    per_run, tokens, extract_s, fit_s, pc1 = [], {}, 0.0, 0.0, None
    for run in data.runs:
        t = time.monotonic()
        states, read = extract(pretrained, run[name].prompts, batch_size=data.batch_size, read=data.read, device=device)
        extract_s += time.monotonic() - t
        t = time.monotonic()
        values, groups = np.asarray(run[name].values), np.asarray(run[name].groups)
        with threadpool_limits(limits=1):  # one BLAS thread keeps the fits bitwise the same on any machine
            measured = [layer_measures(s, values, groups) for s in states]
        per_run.append([m for m, _ in measured])
        pc1 = pc1 or (values, groups, np.stack([scores for _, scores in measured]))
        fit_s += time.monotonic() - t
        for tok in read:
            tokens[tok] = tokens.get(tok, 0) + 1
    return per_run, tokens, pc1, (extract_s, fit_s), states.shape[-1]


def _model_facts(spec: dict, pretrained, width: int) -> dict:
    return {
        "name": spec["model"]["name"],
        "source": pretrained.source,
        "class": type(pretrained.model).__name__,
        "n_layers": pretrained.n_layers,
        "width": width,
    }


def _probe(spec, run_dir, device, data, model_entry, t0) -> dict:
    pretrained = model_entry.build(data, **component_settings(spec, "model")).to(device)
    load_s = time.monotonic() - t0
    rd = RunDir(run_dir)
    rd.lock()
    write_json(rd / "spec.json", spec)
    print(f"[probe] {pretrained.source} loaded in {load_s:.1f} s; {len(data.runs)} runs", file=sys.stderr, flush=True)

    tables, pc1_plots, outputs, timings = {}, {}, {}, {"load_s": round(load_s, 2)}
    for name in data.runs[0]:
        per_run, tokens, pc1_plots[name], seconds, width = _measure_series(pretrained, data, name, device)
        layers = summarize(per_run)
        tables[name] = layers
        outputs[name] = {"layers": layers, "best": best_layers(layers, data.min_rho), "tokens_read": tokens}
        timings[f"{name}_extract_s"], timings[f"{name}_fit_s"] = (round(t, 2) for t in seconds)
        best = outputs[name]["best"]
        print(
            f"[probe] {name}: best by EV {_fmt(best['by_ev'])}; by R2 {_fmt(best['by_r2'])}; "
            f"ordered (rho >= {data.min_rho}) {_fmt(best['by_ev_ordered'])}",
            file=sys.stderr,
            flush=True,
        )

    write_csv(rd / "probe.csv", tables)
    t = time.monotonic()
    from suite.probes.plots import plot_layers, plot_pc1

    plot_layers(rd / "probe_layers.png", tables, title=f"{spec['model']['name']}: number probes per layer")
    plot_pc1(rd / "probe_pc1.png", outputs, pc1_plots, title=spec["model"]["name"])
    timings["plots_s"] = round(time.monotonic() - t, 2)

    wall = time.monotonic() - t0
    result = {
        "spec": spec,
        "run_id": spec_id(spec),
        "runner": "probe",
        "model": _model_facts(spec, pretrained, width),
        "read": data.read,
        "runs": len(data.runs),
        **outputs,
        "task_info": data.info,
        "timings": timings,
        "wall_s": round(wall, 2),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "suite_version": suite.__version__,
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        **machine(device),
    }
    write_json(rd / "result.json", result)
    rd.unlock()
    print(f"[probe] done in {wall:.1f} s", file=sys.stderr)
    return result
