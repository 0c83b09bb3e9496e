"""The bench's precision section: each precision this machine runs (suite.engine.precision.supported),
side by side in one run: the pure step of the MLP (adam) and the transformer (adamw) at batch 512
with its FLOP/s, and runs per hour of the default cell trained alone and as a stack of the
largest --stacks size. Speed-ups are against fp32 measured in the same section."""

from __future__ import annotations

from pathlib import Path

import torch

from suite.bench.measure import MODELS, RUN_STEPS, SAMPLERS, Options, cell_spec, log, pure_step, train_runs
from suite.engine import precision


def precision_section(device: torch.device, options: Options, root: Path) -> dict:
    found = precision.supported(device)
    sizes = sorted({1, max(options.stacks)})
    rows = {}
    for name, how in found.items():
        row = {"how": how, "steps": {}, "runs_per_h": {}}
        for model_name, model_cell in MODELS.items():
            log(f"precision {name}: {model_name} pure step")
            spec = cell_spec({**model_cell, **SAMPLERS["batch512"]}, options, settings={"train.precision": name})
            pure = pure_step(spec, device, options)
            row["steps"][model_name] = {
                "pure_step_s": pure["step_s"],
                "flop": pure["flop"],
                "achieved_flop_per_s": pure["flop_per_s"],
            }
        for k in sizes:
            log(f"precision {name}: default cell, {k} seed(s) as one stack, {options.steps} steps")
            specs = [cell_spec({}, options, seed, {"train.precision": name}) for seed in range(k)]
            wall, _ = train_runs(specs, device, root / name / f"stack{k}")
            row["runs_per_h"][str(k)] = k * 3600 / wall * (options.steps / RUN_STEPS)
        rows[name] = row
    for row in rows.values():
        row["step_speedup_vs_fp32"] = {
            m: rows["fp32"]["steps"][m]["pure_step_s"] / s["pure_step_s"] for m, s in row["steps"].items()
        }
        row["runs_per_h_speedup_vs_fp32"] = {k: r / rows["fp32"]["runs_per_h"][k] for k, r in row["runs_per_h"].items()}
    return {
        "cpu_bf16_units": precision.cpu_bf16_units() if device.type == "cpu" else None,
        "batch": 512,
        "stack_sizes": sizes,
        "steps": options.steps,
        "normalised_to_steps": RUN_STEPS,
        "precisions": rows,
    }


def format_precision(p: dict) -> list[str]:
    units = p["cpu_bf16_units"]
    lines = [
        "precision, side by side: pure step at batch 512 (FLOPs: forward + backward) and runs/hour of the default "
        f"cell ({p['steps']} steps, as {p['normalised_to_steps']}-step runs)"
        + ("" if units is None else f"; CPU bf16 units: {', '.join(units) or 'none (emulated)'}"),
        f"  {'precision':<10}{'model':<13}{'pure ms':>9}{'GFLOP/s':>9}{'vs fp32':>9}",
    ]
    for name, row in p["precisions"].items():
        for model, s in row["steps"].items():
            lines.append(
                f"  {name:<10}{model:<13}{s['pure_step_s'] * 1e3:>9.2f}{s['achieved_flop_per_s'] / 1e9:>9.2f}"
                f"{row['step_speedup_vs_fp32'][model]:>8.2f}x"
            )
    for name, row in p["precisions"].items():
        speedup = row["runs_per_h_speedup_vs_fp32"]
        runs = ", ".join(f"K = {k}: {r:.0f} runs/h ({speedup[k]:.2f}x)" for k, r in row["runs_per_h"].items())
        lines.append(f"  {name:<10}{runs}   [{row['how']}]")
    return lines
