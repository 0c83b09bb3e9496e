"""Number probes: the measures on states of known structure, the prompts, bad input, padding,
and one real run of the bundled MiniLM through the CLI."""

import json
import math
import shutil

import numpy as np
import pytest
import torch
from conftest import cli, run_cli
from suite.tasks.number_probe import base26, number_interval, number_probe

from suite import SuiteError
from suite.cli import main
from suite.probes.runner import best_layers, extract, layer_measures, scaling_rate, summarize
from suite.specs.registry import ALL
from suite.specs.spec import default_run_dir, resolve

GROUPS = [1, 2, 3, 4]


def paper_values(seed=0, per_group=30):
    """Query values and groups exactly as the task draws them."""
    s = number_probe(seed, per_group=per_group, runs=1, data="numbers").runs[0]["numbers"]
    return np.array(s.values), np.array(s.groups)


def states_from(signal, seed=0, noise=0.01, width=64):
    """States that carry `signal` along one random direction, plus isotropic noise."""
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=width)
    direction /= np.linalg.norm(direction)
    signal = (signal - signal.mean()) / signal.std()
    return np.outer(signal, direction) + noise * rng.normal(size=(len(signal), width))


# --- the measures --------------------------------------------------------------------------


def test_log_built_states_are_log_like():
    values, groups = paper_values()
    # Noise below the spacing of log(980..1019), so the order inside each group survives too.
    m, _ = layer_measures(states_from(np.log(values), noise=1e-4), values, groups)
    assert 0.8 < m["beta"] < 1.5
    assert m["rho"] > 0.99 and m["pca_ev"] > 0.9
    assert m["rho_within"] > 0.9  # the order inside each group is encoded too


def test_linear_states_give_beta_near_ten():
    values, groups = paper_values()
    m, _ = layer_measures(states_from(values.astype(float)), values, groups)
    assert 7 < m["beta"] < 15
    assert m["pls_r2"] > 0.99  # PLS on the value finds the linear code exactly


def test_noise_gives_low_rho():
    values, groups = paper_values()
    rng = np.random.default_rng(1)
    m, _ = layer_measures(rng.normal(size=(len(values), 64)), values, groups)
    assert m["rho"] < 0.3
    assert m["pca_ev"] < 0.2


def test_group_only_states_order_between_groups_not_within():
    """rho across groups is high from the group alone; rho_within exposes it (probes.md)."""
    values, groups = paper_values()
    m, _ = layer_measures(states_from(groups.astype(float), noise=0.05), values, groups)
    assert m["rho"] > 0.9
    assert m["rho_within"] < 0.5


def test_scaling_rate_of_geometric_gaps():
    # Group means 0, 1, 1+r, 1+r+r^2: gaps grow by r, so beta = r exactly.
    groups = np.repeat([1, 2, 3, 4], 5)
    for r in (0.5, 1.0, 3.0):
        means = np.cumsum([0, 1, r, r * r])
        assert scaling_rate(np.repeat(means, 5), groups) == pytest.approx(r)
    assert math.isnan(scaling_rate(np.array([0.0, 1.0]), np.array([1, 2])))  # one gap: no slope


def test_constant_states_give_nulls_and_valid_json():
    values, groups = paper_values(per_group=5)
    states = np.full((len(values), 8), 0.4)
    states[:, :2] += 1e-7 * np.random.default_rng(0).normal(size=(len(values), 2))  # float32 rounding
    m, _ = layer_measures(states, values, groups)
    assert all(math.isnan(v) for v in m.values())
    layers = summarize([[m], [m]])
    json.dumps(layers, allow_nan=False)
    assert layers[0]["rho"] == {"mean": None, "std": None}


def test_pca_is_exact_and_does_not_depend_on_numpys_random_state():
    # 600 columns: sklearn's default solver would be its randomized one, unseeded (the 6th decimal moved).
    values, groups = paper_values()
    states = states_from(np.log(values), noise=0.5, width=600)
    np.random.seed(0)
    first, _ = layer_measures(states, values, groups)
    np.random.seed(1)
    second, _ = layer_measures(states, values, groups)
    assert first == second
    centred = states - states.mean(0)
    singular = np.linalg.svd(centred, compute_uv=False)
    assert first["pca_ev"] == pytest.approx(singular[0] ** 2 / (singular**2).sum(), rel=1e-9)


def test_best_layers_paper_rule_and_ordered_rule():
    def layer(i, ev, rho):
        base = {
            "pca_ev": ev,
            "pls_r2": 0.1 * i,
            "rho": rho,
            "beta": 1.0,
            "rho_within": 0.0,
            "pls_rho": rho,
            "pls_beta": 1.0,
        }
        return base

    run_a = [layer(0, 0.9, 0.1), layer(1, 0.5, 0.95), layer(2, 0.3, 0.97)]
    run_b = [layer(0, 0.7, 0.2), layer(1, 0.5, 0.93), layer(2, 0.3, 0.99)]
    layers = summarize([run_a, run_b])
    assert layers[0]["pca_ev"] == {"mean": pytest.approx(0.8), "std": pytest.approx(0.1)}
    best = best_layers(layers, min_rho=0.9)
    assert best["by_ev"]["layer"] == 0  # the paper's rule: highest EV, even where PC1 does not order values
    assert best["by_ev_ordered"]["layer"] == 1
    assert best["by_r2"]["layer"] == 2
    assert best_layers(layers, min_rho=0.999)["by_ev_ordered"] is None


# --- the prompts ---------------------------------------------------------------------------


def test_prompts_follow_the_paper():
    data = number_probe(0)
    assert len(data.runs) == 3 and set(data.runs[0]) == {"numbers", "letters"}
    numbers = data.runs[0]["numbers"]
    assert len(numbers.prompts) == 4 * 30
    for prompt, value, group in zip(numbers.prompts, numbers.values, numbers.groups):
        parts = prompt.split(",")
        assert len(parts) == 4 and parts[-1] == f"{int(value)}="
        for part in parts[:3]:
            left, right = part.split("=")
            assert left == right and 0 <= int(left) <= 10_000
        assert int(value) in number_interval(group, 20)
    assert number_interval(1, 20) == range(1, 40) and number_interval(3, 20) == range(980, 1020)
    letters = data.runs[0]["letters"]
    for prompt, value, group in zip(letters.prompts, letters.values, letters.groups):
        query = prompt.split(",")[-1][:-1]
        assert len(query) == group and query.isalpha() and query.islower() and value == base26(query)
    assert base26("a") == 0 and base26("ba") == 26 and base26("zz") == 26 * 25 + 25


def test_prompts_depend_on_seed_and_run_only():
    a, b = number_probe(0), number_probe(0)
    assert a.runs[1]["numbers"].prompts == b.runs[1]["numbers"].prompts
    assert a.runs[0]["numbers"].prompts != a.runs[1]["numbers"].prompts
    assert number_probe(1).runs[0]["numbers"].prompts == a.runs[1]["numbers"].prompts  # run r uses seed + r


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"groups": ""}, "empty"),
        ({"groups": "1,2,2"}, "distinct"),
        ({"groups": "1,x"}, "integers"),
        ({"groups": "1,2", "width": 70}, "overlap"),
        ({"groups": "2", "width": 200}, "below 0"),
        ({"per_group": 1}, "per_group"),
    ],
)
def test_bad_groups_are_one_line_errors(settings, message):
    with pytest.raises(SuiteError, match=message):
        number_probe(0, **settings)


# --- the spec and the CLI's bad input ------------------------------------------------------


def test_probe_task_names_its_model_and_trains_nothing(tmp_path):
    spec = resolve({"task": "number_probe"})
    assert set(spec) == {"task", "model", "seed"}
    assert default_run_dir(spec, tmp_path).parent.name == "number_probe-smollm2"
    assert spec["model"] == {"name": "smollm2", "dtype": "float32", "device_map": None}
    assert resolve({"task": "number_probe", "model": "hf"}, {"path": "/m"})["model"] == {
        "name": "hf",
        "path": "/m",
        "gguf_file": "",
        "revision": None,
        "dtype": "float32",
        "device_map": None,
        "trust_remote_code": False,
    }
    with pytest.raises(SuiteError, match="trains nothing"):
        resolve({"task": "number_probe", "opt": "adam"})
    assert resolve()["model"]["name"] == "mlp"  # other tasks keep the suite's default


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "hf", "--set", "path=/no/such/model"], "does not exist"),
        (["--model", "hf"], "needs --set path"),
        (["--model", "mlp"], "takes tokens"),
        (["--set", "groups=1,1"], "distinct"),
        (["--opt", "adam"], "trains nothing"),
        (["--set", "dtype=float64"], "not one of float32, float16, bfloat16"),
        (["--set", "revision=main"], "takes 'revision'"),  # the bundled models are local files
    ],
)
def test_cli_bad_input_exit_2_nothing_written(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    assert main(["run", "--task", "number_probe", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not out.exists()


def test_directory_that_is_not_a_model(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "notes.txt").write_text("not a model")
    out = tmp_path / "run"
    assert (
        main(["run", "--task", "number_probe", "--model", "hf", "--set", f"path={tmp_path / 'm'}", "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot load a transformers model" in err
    assert not out.exists()


# --- the real bundled encoder --------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    from suite.models.pretrained import minilm as load_minilm

    torch.set_num_threads(1)
    return load_minilm(None)


def test_model_without_hidden_states(tmp_path, capsys, minilm):
    """An encoder-decoder needs decoder inputs: plain text gives it no hidden states."""
    from transformers import T5Config, T5Model

    T5Model(
        T5Config(vocab_size=minilm.tokenizer.vocab_size, d_model=16, d_ff=32, d_kv=8, num_layers=1, num_heads=2)
    ).save_pretrained(tmp_path / "t5")
    minilm.tokenizer.save_pretrained(tmp_path / "t5")
    out = tmp_path / "run"
    assert (
        main(["run", "--task", "number_probe", "--model", "hf", "--set", f"path={tmp_path / 't5'}", "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hidden states" in err
    assert not out.exists()


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, minilm):
    """A two-layer BERT of width 16 with MiniLM's tokenizer, saved as a local model directory."""
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny") / "bert"
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=minilm.tokenizer.vocab_size,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
        )
    ).save_pretrained(folder)
    minilm.tokenizer.save_pretrained(folder)
    return folder


def test_dtype_and_device_map_reach_from_pretrained_and_the_defaults_load_as_before(tiny_bert):
    hf = ALL["model"].get("hf").build
    prompts = ["1=1,2=", "1234=1234,5678=5678,9999=9999,10005="]
    plain = hf(None, path=str(tiny_bert)).to("cpu")
    assert {p.dtype for p in plain.model.parameters()} == {torch.float32}
    assert not plain.placed and not hasattr(plain.model, "_hf_hook")
    placed = hf(None, path=str(tiny_bert), dtype="bfloat16", device_map="cpu").to("meta")
    assert {p.dtype for p in placed.model.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in placed.model.parameters()} == {"cpu"}  # the map placed it; .to() leaves it
    ours, _ = extract(plain, prompts, batch_size=2, read="equals", device="cpu")
    theirs, _ = extract(placed, prompts, batch_size=2, read="equals", device="cpu")
    assert theirs.dtype == np.float32 and np.abs(ours - theirs).max() < 0.05 * np.abs(ours).max()
    with pytest.raises(SuiteError, match="version of a hub model"):
        hf(None, path=str(tiny_bert), revision="main")


def test_remote_code_runs_only_when_trusted(tmp_path, capsys, tiny_bert):
    """A model directory whose architecture is its own Python code (auto_map), as on the hub."""
    folder = tmp_path / "custom"
    shutil.copytree(tiny_bert, folder)
    (folder / "configuration_tiny.py").write_text(
        "from transformers import BertConfig\n\n\nclass TinyConfig(BertConfig):\n    model_type = 'tiny-custom'\n"
    )
    (folder / "modeling_tiny.py").write_text(
        "from transformers import BertModel\n\nfrom .configuration_tiny import TinyConfig\n\n\n"
        "class TinyModel(BertModel):\n    config_class = TinyConfig\n"
    )
    config = json.loads((folder / "config.json").read_text())
    config |= {
        "model_type": "tiny-custom",
        "auto_map": {"AutoConfig": "configuration_tiny.TinyConfig", "AutoModel": "modeling_tiny.TinyModel"},
    }
    (folder / "config.json").write_text(json.dumps(config))
    args = [
        "run",
        "--task",
        "number_probe",
        "--model",
        "hf",
        "--set",
        f"path={folder}",
        "--set",
        "runs=1",
        "--set",
        "per_group=4",
        "--set",
        "data=numbers",
    ]
    assert main([*args, "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot load" in err and "trust_remote_code" in err
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "trusted"
    # a process of its own: transformers reads HF_MODULES_CACHE (where the remote code is copied) as it is imported
    proc = run_cli(
        *args,
        "--set",
        "trust_remote_code=true",
        "--set",
        "dtype=bfloat16",
        "--set",
        "device_map=cpu",
        "--out",
        out,
        env={"HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["model"]["class"] == "TinyModel" and result["model"]["n_layers"] == 2
    assert result["spec"]["model"] == {
        "name": "hf",
        "path": str(folder),
        "gguf_file": "",
        "revision": None,
        "dtype": "bfloat16",
        "device_map": "cpu",
        "trust_remote_code": True,
    }


def test_a_gguf_model_is_dequantized_once_into_a_copy_that_loads_the_same(tmp_path, monkeypatch, capsys, minilm):
    """transformers parses a GGUF file for ~25 s at every load: the first load saves a float32 copy
    under $SUITE_CACHE, later loads read it. Stood in for here by the bundled MiniLM, handed out as
    transformers hands out a model it read from a GGUF file (with its quantization config)."""
    import copy

    import transformers
    from suite.models.pretrained import load

    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "tiny.gguf").write_bytes(b"GGUF")
    conversions = []
    real_tokenizer, real_model = transformers.AutoTokenizer.from_pretrained, transformers.AutoModel.from_pretrained

    def tokenizer_from(source, gguf_file=None, **kwargs):
        return copy.deepcopy(minilm.tokenizer) if gguf_file else real_tokenizer(source, **kwargs)

    def model_from(source, gguf_file=None, **kwargs):
        if not gguf_file:
            return real_model(source, **kwargs)
        conversions.append(source)
        model = copy.deepcopy(minilm.model)
        model.config.quantization_config = {"quant_method": "gguf", "gguf_file": gguf_file}
        return model

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tokenizer_from)
    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", model_from)
    monkeypatch.setenv("SUITE_CACHE", str(tmp_path / "cache"))
    prompts = ["1=1,2=", "1234=1234,5678=5678,9999=9999,10005="]
    expected, _ = extract(minilm, prompts, batch_size=2, read="equals", device="cpu")
    for _ in range(2):
        loaded = load("hf", str(folder), local=True, gguf_file="tiny.gguf")
        assert loaded.source == f"{folder}/tiny.gguf"  # what result.json records: the GGUF file, not the copy
        assert np.array_equal(extract(loaded, prompts, batch_size=2, read="equals", device="cpu")[0], expected)
    assert conversions == [str(folder)]  # converted once, then read from the copy
    (copy_dir,) = (tmp_path / "cache" / "gguf").iterdir()
    assert copy_dir.name.startswith("tiny-") and "quantization_config" not in json.loads(
        (copy_dir / "config.json").read_text()
    )

    monkeypatch.setenv("SUITE_CACHE", str(folder / "tiny.gguf"))  # a cache that cannot be written: read the GGUF file
    capsys.readouterr()
    loaded = load("hf", str(folder), local=True, gguf_file="tiny.gguf")
    assert np.array_equal(extract(loaded, prompts, batch_size=2, read="equals", device="cpu")[0], expected)
    assert "cannot cache the de-quantized model" in capsys.readouterr().err and len(conversions) == 2


def test_left_padding_leaves_each_prompt_as_it_is_alone(minilm):
    """BERT has absolute positions: padding on the left without rebuilt position ids would shift them."""
    prompts = ["1=1,2=", "1234=1234,5678=5678,9999=9999,10005=", "ab=ab,c="]
    batched, read = extract(minilm, prompts, batch_size=3, read="equals", device="cpu")
    alone = np.concatenate([extract(minilm, [p], batch_size=1, read="equals", device="cpu")[0] for p in prompts], 1)
    assert batched.shape == (7, 3, 384)  # embeddings + 6 layers
    assert np.abs(batched - alone).max() < 1e-4
    assert read == ["="] * 3
    _, last = extract(minilm, prompts, batch_size=3, read="last", device="cpu")
    assert last == ["[SEP]"] * 3


def test_bundled_minilm_end_to_end_through_the_cli(tmp_path):
    out = tmp_path / "run"
    args = [
        "run",
        "--task",
        "number_probe",
        "--model",
        "minilm",
        "--set",
        "runs=2",
        "--set",
        "per_group=8",
        "--out",
        out,
    ]
    proc = cli(*args, env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(out / "result.json")
    for name in ("spec.json", "result.json", "probe.csv", "probe_layers.png", "probe_pc1.png"):
        assert (out / name).stat().st_size > 0
    result = json.loads((out / "result.json").read_text())
    assert result["model"]["n_layers"] == 6 and result["runs"] == 2
    assert result["spec"]["task"]["threads"] is None and result["threads"] == 1  # torch's count: OMP_NUM_THREADS
    for data in ("numbers", "letters"):
        layers = result[data]["layers"]
        assert [row["layer"] for row in layers] == list(range(7))
        for row in layers:
            for key in ("pca_ev", "pls_r2", "rho", "beta"):
                assert set(row[key]) == {"mean", "std"}
            assert 0 < row["pca_ev"]["mean"] <= 1 and 0 <= row["rho"]["mean"] <= 1
        assert result[data]["best"]["by_ev"]["layer"] in range(7)
        assert result[data]["tokens_read"] == {"=": 2 * 4 * 8}
    csv_lines = (out / "probe.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 2 * 7 and csv_lines[0].startswith("data,layer,pca_ev_mean")
    again = cli(*args)
    assert again.returncode == 0 and "already finished" in again.stderr
