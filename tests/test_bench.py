"""`python -m suite bench --quick`: every section's figures are there, finite, and add up. No timing thresholds."""

import json
import math

import pytest
from conftest import REPO, cli

from suite import bench
from suite.bench import measure
from suite.cli import main, make_parser


def numbers(tree):
    """Every number in a JSON tree (booleans are not figures)."""
    if isinstance(tree, dict):
        for value in tree.values():
            yield from numbers(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from numbers(value)
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        yield tree


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "b.json"
    proc = cli("bench", "--quick", "--repeats", "2", "--out", out)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(out.read_text()), out


def test_report_has_every_section_and_the_machine(quick):
    proc, report, out = quick
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    for key in ("commit", "torch_version", "device", "threads", "hostname", "date", "units", "bench_wall_s"):
        assert key in report
    assert report["device"] == "cpu" and report["threads"] == 1  # cli runs it on one thread
    assert {"matmul", "plain", "steps", "profile", "stacks", "precision"} <= set(report)
    assert report["complete"] is True
    assert "targets" not in report  # the bench reports figures; targets are a reader's (README)
    assert "probe" not in report and "compile" not in report and report["skipped"] == ["compile", "probe"]
    assert set(report["steps"]["cells"]) == {"mlp_batch512", "mlp_full", "transformer_batch512", "transformer_full"}
    assert set(report["stacks"]["sizes"]) == {"1", "2"}
    mixed = report["stacks"]["sizes"]["2"]  # two learning rates, still one stack
    assert mixed["lr_per_member_trained_as_stack_of"] == 2 and mixed["lr_per_member_runs_per_h"] > 0
    for section in ("matmul", "steps", "stacks", "precision"):
        figures = list(numbers(report[section]))
        assert figures and all(math.isfinite(x) and x > 0 for x in figures), section
    assert "matmul limit" in proc.stdout and "PASS" not in proc.stdout and "MISS" not in proc.stdout


def test_the_precision_section_runs_fp32_and_bf16_side_by_side_on_any_cpu(quick):
    proc, report, _ = quick
    p = report["precision"]
    assert set(p["precisions"]) == {"fp32", "bf16"}  # no tf32 off CUDA
    assert isinstance(p["cpu_bf16_units"], list)  # native units or none: either way bf16 runs
    assert set(report["matmul"]["lower_precision_limit_flop_per_s"]) == {"bfloat16"}
    fp32, bf16 = p["precisions"]["fp32"], p["precisions"]["bf16"]
    assert set(fp32["steps"]) == set(bf16["steps"]) == {"mlp", "transformer"}
    assert set(fp32["runs_per_h"]) == set(bf16["runs_per_h"]) == {"1", "2"}  # alone and the largest stack
    assert fp32["step_speedup_vs_fp32"] == {"mlp": 1.0, "transformer": 1.0}
    for model, step in bf16["steps"].items():
        assert bf16["step_speedup_vs_fp32"][model] == pytest.approx(
            fp32["steps"][model]["pure_step_s"] / step["pure_step_s"], rel=1e-12
        )
    assert "precision, side by side" in proc.stdout and "bf16" in proc.stdout


def test_the_profile_counts_one_batch_draw_per_member_and_step_and_ranks_the_busiest_ops(quick):
    proc, report, _ = quick
    p = report["profile"]
    assert (p["k"], p["steps"]) == (2, 3)  # the largest stack size asked for (1,2), up to 256
    assert p["randperm_per_step"] == 2  # one draw per member, each its own generator's
    assert p["aten_ops_per_step"] > 0 and 0 < p["randperm_per_step_s"] < p["host_self_per_step_s"]
    shares = [r["share"] for r in p["top_host"]]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1 + 1e-9
    assert "top_device" not in p and "device_busy_fraction" not in p  # a GPU's figures, not a CPU's
    assert "profile, a stack of 2" in proc.stdout


def test_figures_are_consistent(quick):
    _, report, _ = quick
    limit = report["matmul"]["limit_flop_per_s"]
    passes = report["matmul"]["passes_flop_per_s"]
    assert len(passes) == 2  # at the start and at the end: the best of both is the limit
    assert report["matmul"]["per_size_flop_per_s"] == {n: max(p[n] for p in passes) for n in passes[0]}
    assert limit == max(report["matmul"]["per_size_flop_per_s"].values())
    for name, cell in report["steps"]["cells"].items():
        assert cell["achieved_flop_per_s"] == pytest.approx(cell["flop"] / cell["pure_step_s"], rel=1e-12)
        assert cell["fraction_of_limit"] == pytest.approx(cell["achieved_flop_per_s"] / limit, rel=1e-12)
        assert cell["overhead_ratio"] == pytest.approx(cell["whole_step_s"] / cell["pure_step_s"], rel=1e-12)
        assert cell["whole_step_s"] == pytest.approx(cell["whole_wall_s"] / cell["whole_steps"], rel=1e-12)
        assert cell["whole_steps"] == 20, name  # the loop ran its whole budget: no early stop
    # At p = 43 the split trains on 555 pairs: batch 512 and full batch, FLOPs in proportion.
    cells = report["steps"]["cells"]
    assert (cells["mlp_batch512"]["batch"], cells["mlp_full"]["batch"]) == (512, 555)
    assert cells["mlp_full"]["flop"] == pytest.approx(cells["mlp_batch512"]["flop"] * 555 / 512, rel=1e-9)
    assert cells["transformer_full"]["flop"] > 0

    stacks = report["stacks"]
    steps, per_run = stacks["steps"], stacks["normalised_to_steps"]
    single = stacks["sizes"]["1"]
    assert stacks["sizes"]["2"]["trained_as_stack_of"] == 2  # the MLP with Adam is exact as a stack
    for row in stacks["sizes"].values():
        k = row["k"]
        assert row["runs_per_h"] == pytest.approx(k * 3600 / row["wall_s"] * steps / per_run, rel=1e-12)
        assert row["sequential_wall_s"] == pytest.approx(k * single["wall_s"], rel=1e-12)
        assert row["sequential_runs_per_h"] == pytest.approx(single["runs_per_h"], rel=1e-12)
        assert row["speedup"] == pytest.approx(single["wall_s"] * k / row["wall_s"], rel=1e-12)


def test_the_suite_and_the_plain_loop_run_side_by_side(quick):
    proc, report, _ = quick
    plain = report["plain"]
    assert (plain["p"], plain["steps"], plain["eval_every"], plain["repeats"]) == (43, 20, 20, 2)
    for key in ("suite_wall_s", "plain_wall_s", "suite_loop_s", "plain_loop_s"):
        assert len(plain[key]) == 2 and all(0 < t < 600 for t in plain[key]), key
    assert plain["ratio"] == pytest.approx(min(plain["suite_wall_s"]) / min(plain["plain_wall_s"]), rel=1e-12)
    assert plain["loop_ratio"] == pytest.approx(min(plain["suite_loop_s"]) / min(plain["plain_loop_s"]), rel=1e-12)
    assert plain["suite_wall_s"][0] > plain["suite_loop_s"][0] and plain["plain_wall_s"][0] > plain["plain_loop_s"][0]
    assert set(plain["final_val_acc"]) == {"suite", "plain"}
    assert "a single run vs a plain PyTorch loop" in proc.stdout


def test_skipped_limit_leaves_no_fraction(tmp_path):
    out = tmp_path / "b.json"
    proc = cli("bench", "--quick", "--skip", "matmul,plain,stacks,precision", "--steps", "5", "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert "matmul" not in report and "stacks" not in report
    assert all(c["fraction_of_limit"] is None and c["whole_steps"] == 5 for c in report["steps"]["cells"].values())


@pytest.mark.parametrize(
    "flags",
    [
        ("--stacks", "0,8"),
        ("--stacks", "1,x"),
        ("--skip", "probe,nonsense"),
        ("--steps", "0"),
        ("--repeats", "0"),
        ("--device", "tpu"),
    ],
)
def test_bad_flags_one_line_exit_2_nothing_written(tmp_path, flags):
    out = tmp_path / "b.json"
    proc = cli("bench", "--quick", *flags, "--out", out)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error:")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_section_that_cannot_run_is_left_out_with_one_line_before_anything_is_timed(tmp_path, capsys, monkeypatch):
    events = []
    monkeypatch.setattr(bench, "PROBE_NEEDS", (("no_such_package_here", "pip install it"),))
    monkeypatch.setattr(measure, "log", lambda message: events.append(message))
    monkeypatch.setattr(measure, "matmul_rates", lambda *args: events.append("timing") or {"64": 1e9})
    out = tmp_path / "b.json"
    skip = "plain,steps,profile,stacks,precision,compile"  # the profile: a stack of 32, minutes of CPU
    assert main(["bench", "--skip", skip, "--out", str(out)]) == 0
    assert events[0] == "skipping probe: needs no_such_package_here (pip install it)" and "timing" in events[1:]
    report = json.loads(out.read_text())
    assert report["unavailable"] == {"probe": "needs no_such_package_here (pip install it)"} and "probe" not in report
    assert "probe: not run here, it needs no_such_package_here" in capsys.readouterr().out


def test_an_interrupted_bench_keeps_the_sections_it_finished(tmp_path, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(measure, "stack_section", interrupted)
    out = tmp_path / "b.json"
    assert main(["bench", "--quick", "--skip", "plain,steps,precision", "--out", str(out)]) == 130  # Ctrl-C's exit code
    report = json.loads(out.read_text())
    assert report["complete"] is False and "stacks" not in report
    assert len(report["matmul"]["passes_flop_per_s"]) == 1  # the pass at the start, measured before the interruption


def test_a_section_that_fails_records_its_error_and_the_rest_go_on(tmp_path, capsys, monkeypatch):
    def failing(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(measure, "stack_section", failing)
    out = tmp_path / "b.json"
    assert main(["bench", "--quick", "--skip", "plain,steps,precision", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["stacks"] == {"error": "RuntimeError: boom"} and report["complete"] is True
    assert len(report["matmul"]["passes_flop_per_s"]) == 2  # the end pass ran after the failure
    assert "stacks: failed: RuntimeError: boom" in capsys.readouterr().out


def test_a_bench_stopped_in_the_stacks_keeps_the_sizes_it_took_and_measures_nothing_after(
    tmp_path, capsys, monkeypatch
):
    # a deadline's SIGTERM inside a training loop became a section error and the bench went on
    # past its deadline (killed there, on a GPU, with the sizes it had taken lost)
    from suite.engine.train import Preempted

    real, calls = measure.train_runs, []

    def stopped_at_the_second(specs, device, root):
        calls.append(len(specs))
        if len(calls) == 2:
            raise Preempted("SIGTERM", 7, [root / f"seed{i}" for i in range(len(specs))])
        return real(specs, device, root)

    monkeypatch.setattr(measure, "train_runs", stopped_at_the_second)
    out = tmp_path / "b.json"
    assert main(["bench", "--quick", "--skip", "plain,steps", "--out", str(out)]) == 3
    report = json.loads(out.read_text())
    assert list(report["stacks"]["sizes"]) == ["1"] and report["stacks"]["sizes"]["1"]["runs_per_h"] > 0
    assert report["stacks"]["error"] == "stopped by SIGTERM at step 7" and report["stopped"] == "SIGTERM"
    assert "precision" not in report and report["complete"] is False
    assert len(report["matmul"]["passes_flop_per_s"]) == 1  # no end pass after a stop
    assert "stopped by SIGTERM: the report holds what was measured before" in capsys.readouterr().err


OLD_REPORT = REPO / "leaderboards/bench/h200-2026-11-27/run2-bench.json"  # its section was "ensembles" then


def test_a_report_and_flags_of_the_ensembles_section_read_as_the_stacks_section():
    from suite.bench.table import current_names, format_report

    old = json.loads(OLD_REPORT.read_text())
    assert "ensembles" in old and "stacks" not in old
    now = current_names(old)
    assert "ensembles" not in now and list(now["stacks"]["sizes"]) == ["1", "32", "256"]
    row = now["stacks"]["sizes"]["32"]
    assert row["trained_as_stack_of"] == row["lr_per_member_trained_as_stack_of"] == 32
    assert "trained_as_ensemble_of" not in row and old["ensembles"]["sizes"]["32"]["trained_as_ensemble_of"] == 32
    table = format_report(old)
    assert "stacks, modular mlp adam random(batch 512), 600 steps" in table and "stack 32" in table
    assert "stacks: failed: stopped by SIGTERM at step 461" in table  # its error, under the name now
    # the flag's and the section's old names
    assert make_parser().parse_args(["bench", "--ensembles", "1,4"]).stacks == "1,4"
    assert measure.Options(skip="ensembles,probe").skip == {"stacks", "probe"}


def test_the_profile_times_each_phase_of_a_whole_train_and_counts_its_syncs(quick):
    proc, report, _ = quick
    t = report["profile"]["train"]
    parts = t["parts"]
    assert list(parts) == ["build", "set-up", "step", "evaluate", "write", "checkpoint"]  # the loop's phases
    assert (t["steps"], t["evaluations"]) == (20, 3) and parts["step"][
        "calls"
    ] == 20  # steps 0-19; evaluations 0, 10, 20
    assert parts["checkpoint"]["calls"] == 2 and parts["write"]["calls"] == 3  # checkpoints at steps 10 and 20
    assert all(p["s"] > 0 and 0 < p["share"] < 1 for p in parts.values())
    assert sum(p["s"] for p in parts.values()) + t["other_s"] == pytest.approx(t["total_s"])
    assert t["syncs_per_evaluation"] == parts["evaluate"]["syncs"] / 3 and t["syncs_per_step"] >= 0
    assert "the whole train() of the stack, 20 steps and 3 evaluations" in proc.stdout
