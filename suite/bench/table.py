"""The bench's report as a table for the terminal: one short function per section."""

from __future__ import annotations

from suite.bench.measure import OLD_SECTIONS, SECTIONS
from suite.bench.precision_section import format_precision


def _g(flop_per_s: float) -> str:
    return f"{flop_per_s / 1e9:.1f} GFLOP/s"


def _load(loadavg) -> str:
    return ", ".join(f"{x:.1f}" for x in loadavg)


# a stacks row's keys before they were renamed (reports written before, such as leaderboards/bench/'s)
OLD_ROW_KEYS = {
    "trained_as_ensemble_of": "trained_as_stack_of",
    "lr_per_member_trained_as_ensemble_of": "lr_per_member_trained_as_stack_of",
}


def _renamed(names: dict, d: dict) -> dict:
    """d with its keys under their names now (a key under its new name wins over its old one)."""
    return {names.get(k, k): v for k, v in d.items() if names.get(k) not in d}


def current_names(report: dict) -> dict:
    """A report written before its stacks section was renamed (`ensembles`, `trained_as_ensemble_of`)
    as one written now."""
    report = _renamed(OLD_SECTIONS, report)
    stacks = report.get("stacks")
    if isinstance(stacks, dict) and isinstance(stacks.get("sizes"), dict):
        sizes = {k: _renamed(OLD_ROW_KEYS, row) for k, row in stacks["sizes"].items()}
        report["stacks"] = stacks | {"sizes": sizes}
    return report


def format_report(report: dict) -> str:
    report = current_names(report)
    lines = _header(report)
    # a section that failed shows what it measured before (the stacks' sizes), if anything
    measured = {k: v for k, v in report.items() if not (isinstance(v, dict) and set(v) == {"error"})}
    for section, lines_of in FORMATS.items():
        if section in measured:
            lines += [""] + lines_of(measured[section])
    return "\n".join(lines + ["", f"bench took {report['bench_wall_s']:.0f} s"])


def _header(report: dict) -> list[str]:
    lines = [
        f"suite bench: commit {(report['commit'] or '?')[:8]}{' (uncommitted changes)' if report['dirty'] else ''}, "
        f"torch {report['torch_version']}, {report['device']} ({report['device_name']}), "
        f"{report['threads']} threads, {report['hostname']}, {report['date']}",
        f"load average (1, 5, 15 min) at start {_load(report['loadavg_start'])}, at end "
        f"{_load(report['loadavg_end'])} on {report['cpu_count']} cores (load above the bench's own threads: "
        "others shared the machine)",
    ]
    if report["quick"]:
        lines.append(f"QUICK mode ({report['settings']}): figures check the code paths, not the machine")
    lines += [f"{section}: not run here, it {reason}" for section, reason in report["unavailable"].items()]
    lines += [
        f"{section}: failed: {report[section]['error']}" for section in SECTIONS if "error" in report.get(section, {})
    ]
    return lines


def _matmul(m: dict) -> list[str]:
    sizes = ", ".join(f"{n}: {_g(v)}" for n, v in m["per_size_flop_per_s"].items())
    return [
        f"matmul limit (fp32, best sustained, best of a pass at the start and one at the end): "
        f"{_g(m['limit_flop_per_s'])}   [{sizes}]"
    ] + [f"matmul limit ({name}): {_g(rate)}" for name, rate in m.get("lower_precision_limit_flop_per_s", {}).items()]


def _plain(p: dict) -> list[str]:
    return [
        f"a single run vs a plain PyTorch loop: {p['cell']}, p = {p['p']}, {p['steps']} steps, evaluating "
        f"every {p['eval_every']}; fresh processes, best of {p['repeats']}, interleaved",
        f"  wall (start-up included)   suite {p['suite_best_s']:.2f} s, plain {p['plain_best_s']:.2f} s: "
        f"{p['ratio']:.3f}x",
        f"  loop (the result's wall_s) suite {min(p['suite_loop_s']):.2f} s, plain {min(p['plain_loop_s']):.2f} s: "
        f"{p['loop_ratio']:.3f}x   (final val acc {p['final_val_acc']['suite']:.4f} vs "
        f"{p['final_val_acc']['plain']:.4f})",
    ]


def _steps(s: dict) -> list[str]:
    lines = [
        f"steps, modular p = {s['p']} (FLOPs: forward + backward; the optimizer's elementwise work not counted)",
        f"  {'cell':<30}{'batch':>6}{'pure ms':>9}{'MFLOP':>9}{'GFLOP/s':>9}{'of limit':>9}{'whole ms':>10}"
        f"{'overhead':>9}",
    ]
    for name, c in s["cells"].items():
        frac = f"{c['fraction_of_limit']:.1%}" if c["fraction_of_limit"] is not None else "-"
        lines.append(
            f"  {name + ' (' + c['opt'] + ')':<30}{c['batch']:>6}{c['pure_step_s'] * 1e3:>9.2f}"
            f"{c['flop'] / 1e6:>9.1f}{c['achieved_flop_per_s'] / 1e9:>9.2f}{frac:>9}"
            f"{c['whole_step_s'] * 1e3:>10.2f}{c['overhead_ratio']:>8.2f}x"
        )
    return lines + [
        f"  pure = median of forward + backward + optimizer.step on one fixed batch; whole = the loop's "
        f"wall_s / steps over {c['whole_steps']} steps, evaluating every {c['eval_every']}"
    ]


def _stacks(e: dict) -> list[str]:
    lines = [
        f"stacks, {e['cell']}, {e['steps']} steps; runs/hour of {e['normalised_to_steps']}-step runs "
        "(the default cell groks at ~1700 steps and stops at ~2200)",
        f"  {'K':>5}{'trained as':>14}{'wall s':>9}{'runs/h':>10}{'sequential runs/h':>19}{'speed-up':>10}"
        f"{'lr per member runs/h':>22}",
    ]
    for r in e["sizes"].values():
        mixed = f"{r['lr_per_member_runs_per_h']:>22.0f}" if "lr_per_member_runs_per_h" in r else f"{'-':>22}"
        lines.append(
            f"  {r['k']:>5}{'stack ' + str(r['trained_as_stack_of']):>14}{r['wall_s']:>9.1f}"
            f"{r['runs_per_h']:>10.0f}{r['sequential_runs_per_h']:>19.0f}{r['speedup']:>9.2f}x{mixed}"
        )
    return lines + ["  sequential = K times the K = 1 wall; lr per member: the K members each at their own lr"]


def _profile(p: dict) -> list[str]:
    lines = [
        f"profile, a stack of {p['k']} ({p['cell']}): {p['step_s'] * 1e3:.2f} ms a step unprofiled; per step "
        f"under the profiler, host ops {p['host_self_per_step_s'] * 1e3:.2f} ms ({p['aten_ops_per_step']:.0f} aten "
        f"ops), drawing batches {p['randperm_per_step_s'] * 1e3:.2f} ms ({p['randperm_per_step']:.0f} randperm)"
    ]
    if "device_busy_fraction" in p:
        lines.append(
            f"  GPU busy {p['device_busy_per_step_s'] * 1e3:.2f} ms a step ({p['device_busy_fraction']:.0%} of it), "
            f"{p['kernel_launches_per_step']:.0f} launches"
        )
    for side in ("top_device", "top_host"):
        for r in p.get(side, [])[:6]:
            lines.append(
                f"  {side[4:]:<7}{r['op'][:60]:<62}{r['calls_per_step']:>8.1f}/step"
                f"{r['self_per_step_s'] * 1e3:>9.3f} ms{r['share']:>7.1%}"
            )
    if t := p.get("train"):
        lines.append(
            f"  the whole train() of the stack, {t['steps']} steps and {t['evaluations']} evaluations under the "
            f"profiler: {t['total_s']:.2f} s; syncs {t['syncs_per_step']:.1f} a step, "
            f"{t['syncs_per_evaluation']:.1f} an evaluation"
        )
        for name, part in t["parts"].items():
            lines.append(
                f"    {name:<11}{part['s']:>8.3f} s{part['share']:>7.1%}  {part['calls']:>5} calls"
                f"{part['syncs']:>7} syncs{part['launches']:>8} launches"
            )
        lines.append(f"    {'other':<11}{t['other_s']:>8.3f} s{t['other_s'] / t['total_s']:>7.1%}")
    return lines


def _probe(p: dict) -> list[str]:
    parts = ", ".join(f"{k} {v}" for k, v in p["timings_s"].items())
    return [f"number probe ({p['model']}, default spec, {p['threads']} thread(s)): {p['wall_s']:.1f} s   [{parts}]"]


def _compile(report: dict) -> list[str]:
    lines = [
        "torch.compile, pure step at batch 512 (warm-up excluded; compile = the first compiled step, "
        "shorter when inductor's on-disk cache already holds the code)"
    ]
    for name, c in report["cells"].items():
        if "error" in c:
            lines.append(f"  {name:<12} eager {c['eager_step_s'] * 1e3:.2f} ms; compile failed: {c['error']}")
        else:
            lines.append(
                f"  {name:<12} eager {c['eager_step_s'] * 1e3:.2f} ms, compiled {c['compiled_step_s'] * 1e3:.2f} "
                f"ms ({c['speedup']:.2f}x), compile {c['compile_s']:.1f} s"
            )
    return lines


FORMATS = {
    "matmul": _matmul,
    "plain": _plain,
    "steps": _steps,
    "profile": _profile,
    "stacks": _stacks,
    "precision": format_precision,
    "probe": _probe,
    "compile": _compile,
}
