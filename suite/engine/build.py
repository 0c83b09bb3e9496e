"""suite.build: what a spec describes, built as one run trains it.

    run = suite.build(spec, "cpu")   # spec: a Spec, or its JSON form (resolve(), a spec.json)
    run.model, run.optimizer, run.filter, run.data, run.sampler

The training loop, the grid's check, the bench and the tests all build through here, so a
component is built one way wherever it runs. The seed fixes the model's initialisation and the
generator the sampler draws with; bad input raises SuiteError here, before anything is written.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from suite.errors import SuiteError
from suite.results.rundir import rng_states
from suite.specs.contracts import GradFilter, ParamGroups, Sampler, check_built
from suite.specs.data import TaskData
from suite.specs.registry import ALL
from suite.specs.spec import Spec, task_data


@dataclass
class Built:
    """One run's parts. sampler, generator, optimizer and filter are None for a task that brings
    its own runner (it trains nothing)."""

    spec: Spec
    data: TaskData  # on the device
    model: nn.Module  # unstacked; the loop stacks members' models (suite/engine/stacked.py)
    sampler: Sampler | None  # draws on the CPU from the CPU copy of the data
    generator: torch.Generator | None
    rng: dict  # torch's global RNG states right after the model's initialisation: the loop starts from them
    optimizer: torch.optim.Optimizer | None = None
    filter: GradFilter | None = None


def build(
    spec: Spec | dict, device: torch.device | str = "cpu", data: TaskData | None = None, updates: bool = True
) -> Built:
    """The spec's data (built unless given), model, sampler and, with `updates`, its optimizer and
    gradient filter over the model's parameters (the loop leaves them out: a stack builds its own
    over the stacked parameters, suite/engine/updates.py)."""
    spec, device = Spec.of(spec), torch.device(device)
    json_spec = spec.to_json()
    with _fits(spec):
        data, model_entry = task_data(json_spec, data)
        if spec.train is not None and not (len(data.y_train) and len(data.y_val)):
            raise SuiteError(
                f"task '{spec.task.name}' with these settings has {len(data.y_train)} training "
                f"and {len(data.y_val)} validation examples: it needs some of each"
            )
        host, data = data, data.to(device)
        with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if device.type == "cuda" else []):
            torch.manual_seed(spec.seed)  # the model's initialisation; the caller's global RNG is left as it was
            model = model_entry.build(data, **spec.model.settings).to(device)
            rng = rng_states(device)
    if spec.train is None:
        return Built(spec, data, model, None, None, rng)
    # The sampler draws on the CPU, from the CPU copy of the data, so that a seed trains on the
    # same batches on every device (a CUDA generator draws other numbers); the stack moves the indices.
    generator = torch.Generator().manual_seed(spec.seed)
    sampler = ALL["sampler"].get(spec.sampler.name).build(host, generator, **spec.sampler.settings)
    check_built("sampler", spec.sampler.name, sampler, Sampler)
    if sampler.reads_embedding_grad and getattr(model, "embedding_weight", None) is None:
        raise SuiteError(
            f"sampler '{spec.sampler.name}' reads the token-embedding gradients, "
            f"but model '{spec.model.name}' here has no token embedding"
        )
    built = Built(spec, data, model, sampler, generator, rng)
    if updates:
        built.optimizer, built.filter = build_optimizer(spec, model), build_filter(spec, model)
    return built


def build_optimizer(spec: Spec, model) -> torch.optim.Optimizer:
    """The spec's optimizer over a model's parameters (a run's own, a stack's, or a member's view of
    it); the learning rate a warmup scales from kept as base_lr."""
    optimizer = ALL["opt"].get(spec.opt.name).build(ParamGroups.of(model), **spec.opt.settings)
    check_built("optimizer", spec.opt.name, optimizer, torch.optim.Optimizer)
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]
    return optimizer


def build_filter(spec: Spec, model) -> GradFilter:
    """The spec's gradient filter over a model's parameters, as build_optimizer."""
    params = ParamGroups.of(model).all
    grad_filter = ALL["filter"].get(spec.filter.name).build(params, **spec.filter.settings)
    check_built("filter", spec.filter.name, grad_filter, GradFilter)
    return grad_filter


@contextmanager
def _fits(spec: Spec):
    """Settings whose tensors cannot be allocated (a width of 1e11, p in the millions) are bad input."""
    too_big = f"task '{spec.task.name}' and model '{spec.model.name}' with these settings do not fit in memory"
    try:
        yield
    except (MemoryError, torch.OutOfMemoryError) as err:
        raise SuiteError(f"{too_big} ({type(err).__name__})") from None
    except RuntimeError as err:
        if "alloc" not in str(err):
            raise
        line = (str(err).splitlines() or [""])[0].split("DefaultCPUAllocator: ")[-1]
        raise SuiteError(f"{too_big} ({line})") from None
