"""One Adam over a stack whose members differ in their settings (learning rate, weight decay, betas,
eps, Adam-LR's c, coupled or decoupled decay): suite/engine/updates.py's `SettingsUpdate`.

Each member keeps a torch optimizer of its own, built by its registered builder over its slice of
the stacked parameters (a view), as `MemberUpdates` builds it, but never stepped: a shell that
holds the member's settings (its param groups: warmup writes their "lr") and gives its checkpoint
the format of a separate run. `StackedAdam.step` steps every stacked parameter once for all K
members. A setting the members share is passed to each op as the scalar torch's Adam passes; one
that differs becomes a [K] tensor viewed [K, 1, ...] over the stacked tensors. On a GPU every
parameter goes whole, each op a foreach over them: the launches of a step do not grow with K. On
CPU a parameter goes a slice of members at a time, each slice at most CPU_SLICE_BYTES of it, so
that the step's passes over it run in the cache: its ops grow with K x a member's bytes / 1 MiB,
not with K alone (one slice for a small model). Either way a stack whose members differ in their
settings costs about what one of equal settings costs, or less.

Exactness. On CPU torch's Adam steps each parameter with `_single_tensor_adam`; this steps each
stacked parameter with the very same elementwise ops in the same order (CPU `_foreach_*` ops run
the per-tensor ops one tensor after another; a slice keeps each member's elements whole), every
scalar computed in Python as torch computes it (1 - lr * wd, 1 - beta1 ** step, its ** 0.5,
-lr / bc1) and rounded once to the parameter's dtype, as torch rounds a Python scalar it hands a
kernel. Where a scalar becomes a [K] tensor:
- x * s, x / s, x + s, lerp(x, y, s): the same kernel reads s from a tensor: the same rounding;
- addcmul(x, y, y, value=v) computes x + (v * y) * y: it becomes addcmul(x, y * V, y) (1 * (y * v)
  is y * v exactly);
- addcdiv(x, y, z, value=v) computes x + (v * y) / z: it becomes addcdiv(x, y * V, z);
- coupled decay, g.add(p, alpha=wd), computes fma(p, wd, g) in its vector loop: it becomes
  addcmul(g, p, WD), g + (1 * p) * wd, which torch's build contracts to the same fma. That rests on
  how torch was compiled, not on its source: tests/test_stacked_adam.py checks every such kernel,
  scalar against column, at every length from one element to past two vectors.
A member with no decay beside members with some multiplies by 1.0 (decoupled) or adds 0 * p
(coupled): the same numbers while p is finite (a non-finite p has diverged anyway).
On a GPU torch's Adam takes its foreach path, whose op order differs: members agree with their
separate runs to float32 rounding, as any stack there does.

What it takes (`fits`): members whose optimizers are all torch.optim.Adam or AdamW exactly (adam,
adamw, adamlr, adamwlr), without amsgrad, maximize, capturable, differentiable or fused, their
groups holding the same stacked parameters, in float32 or float64. Anything else trains with one
optimizer per member (MemberUpdates).
"""

from __future__ import annotations

import torch

from suite.engine.stacked import Stacked

ADAMS = (torch.optim.Adam, torch.optim.AdamW)
OFF = ("amsgrad", "maximize", "capturable", "differentiable", "fused")
STATE_KEYS = ("step", "exp_avg", "exp_avg_sq")  # torch's Adam makes them in this order
# On CPU a parameter is stepped a slice of members at a time, at most this many bytes of it (one
# member at least): a step's ~10 passes over the slice, its gradient and its two moments then run in
# the cache. Stepped whole, a K = 8 stack of the default MLP (a 1 MiB matrix per member) took longer
# than one optimizer per member (leaderboards/bench/README.md); on a GPU every parameter goes whole.
CPU_SLICE_BYTES = 2**20


def fits(shells: list, views: list, model: Stacked) -> str | None:
    """Why StackedAdam cannot step these members' optimizers, or None where it can."""
    if not all(type(shell) in ADAMS for shell in shells):
        return "not torch's Adam or AdamW"
    names = [_group_names(shell, view) for shell, view in zip(shells, views)]
    if any(n is None or n != names[0] for n in names):
        return "the members' param groups hold different parameters"
    for shell in shells:
        for group in shell.param_groups:
            if any(group.get(flag) for flag in OFF):
                return f"a group has one of {', '.join(OFF)} on"
            if not all(isinstance(v, (int, float)) for v in (group["lr"], *group["betas"], group["eps"])):
                return "a setting is a tensor"
            if not isinstance(group["weight_decay"], (int, float)):
                return "a setting is a tensor"
    if any(model.stacked(n).dtype not in (torch.float32, torch.float64) for group in names[0] for n in group):
        return "a parameter is neither float32 nor float64"
    return None


def _group_names(shell, view) -> list[list[str]] | None:
    """The stacked parameters' names in each of the shell's groups (None for one not a view's)."""
    name_of = {id(t): n for n, t in view.named.items()}
    names = [[name_of.get(id(p)) for p in group["params"]] for group in shell.param_groups]
    return None if any(n is None for group in names for n in group) else names


class StackedAdam:
    """Adam over the stacked parameters, member i with the settings of shells[i] (see the module)."""

    def __init__(self, shells: list[torch.optim.Optimizer], views: list, model: Stacked):
        self.shells, self.views, self.model = shells, views, model
        self.names = _group_names(shells[0], views[0])
        self.state: dict[str, dict] = {}  # stacked parameter name -> step, exp_avg [K, ...], exp_avg_sq [K, ...]
        self._columns: dict = {}  # the settings as [K] tensors, by their values (kept across steps)
        self._this_step: dict = {}  # those of this step (its bias corrections, its warmup's lr)
        self.slice_bytes = CPU_SLICE_BYTES  # on CPU (the bench sets it to compare)

    # --- the step ------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self) -> None:
        self._this_step = {}
        for g, names in enumerate(self.names):
            settings = [shell.param_groups[g] for shell in self.shells]
            buckets: dict = {}
            for name in names:
                p = self.model.stacked(name)
                if p.grad is None:
                    continue
                state = self.state.get(name)
                if state is None:
                    state = self.state[name] = _new_state(p)
                state["step"] += 1
                step = state["step"].item()
                if p.device.type == "cpu":  # a slice of members at a time, its ops in the cache
                    for i, j in _slices(p, self.slice_bytes):
                        parts = (p[i:j], p.grad[i:j], state["exp_avg"][i:j], state["exp_avg_sq"][i:j])
                        self._step(settings[i:j], *([t] for t in parts), p.device, p.dtype, step)
                else:  # every parameter at once: a foreach op is one launch where the members agree
                    tensors = (p, p.grad, state["exp_avg"], state["exp_avg_sq"])
                    for bucket, t in zip(buckets.setdefault((p.device, p.dtype, step), ([], [], [], [])), tensors):
                        bucket.append(t)
            for (device, dtype, step), lists in buckets.items():
                self._step(settings, *lists, device, dtype, step)

    def _step(self, settings, params, grads, exp_avgs, exp_avg_sqs, device, dtype, step: float) -> None:
        """torch's _single_tensor_adam on these stacked parameters (all at this step), op for op."""
        lr = [group["lr"] for group in settings]
        beta1 = [group["betas"][0] for group in settings]
        beta2 = [group["betas"][1] for group in settings]
        wd = [group["weight_decay"] for group in settings]
        decoupled = [bool(group["decoupled_weight_decay"]) for group in settings]

        def per(values: list[float], cache: bool = True):
            """One scalar where the members agree, else [K] viewed [K, 1, ...] for each parameter."""
            columns = [self._column(values, device, dtype, p.dim(), cache) for p in params]
            return values[0] if columns[0] is None else columns

        if any(d and w != 0 for w, d in zip(wd, decoupled)):  # p * (1 - lr * wd), as torch decays decoupled
            shrink = [1 - rate * w if d and w != 0 else 1.0 for rate, w, d in zip(lr, wd, decoupled)]
            torch._foreach_mul_(params, per(shrink, cache=False))
        coupled = [0.0 if d else w for w, d in zip(wd, decoupled)]
        if any(c != 0 for c in coupled):
            factor = per(coupled)
            if isinstance(factor, list):
                grads = torch._foreach_addcmul(grads, params, factor)
            else:
                grads = torch._foreach_add(grads, params, alpha=factor)
        torch._foreach_lerp_(exp_avgs, grads, per([1 - b for b in beta1]))
        torch._foreach_mul_(exp_avg_sqs, per(beta2))
        value = per([1 - b for b in beta2])
        if isinstance(value, list):
            torch._foreach_addcmul_(exp_avg_sqs, torch._foreach_mul(grads, value), grads)
        else:
            torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=value)
        del grads
        step_size = [rate / (1 - b**step) for rate, b in zip(lr, beta1)]  # torch's expressions, in Python
        bias_correction2_sqrt = [(1 - b**step) ** 0.5 for b in beta2]
        denoms = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denoms, per(bias_correction2_sqrt, cache=False))
        torch._foreach_add_(denoms, per([group["eps"] for group in settings]))
        negative = per([-s for s in step_size], cache=False)
        if isinstance(negative, list):
            torch._foreach_addcdiv_(params, torch._foreach_mul(exp_avgs, negative), denoms)
        else:
            torch._foreach_addcdiv_(params, exp_avgs, denoms, value=negative)

    def _column(self, values: list[float], device, dtype, dim: int, cache: bool) -> torch.Tensor | None:
        """None where all values are equal; else the [K] tensor of them viewed [K, 1, ...] (dim
        dimensions), each value rounded once to dtype as a kernel rounds a Python scalar. cache: a
        setting that stays (kept across steps); else one of this step (kept for its other parameters)."""
        first = values[0]
        if all(v == first for v in values):
            return None
        kept = self._columns if cache else self._this_step
        key = (tuple(values), device, dtype, dim)
        if key not in kept:
            column = torch.tensor(values, dtype=dtype)  # each Python float rounded to nearest, as Scalar.to<float>
            if device.type != "cpu":  # pinned: the copy need not wait for the steps queued before it
                column = column.pin_memory().to(device, non_blocking=True)
            if len(kept) > 256:
                kept.clear()
            kept[key] = column.view(-1, *[1] * (dim - 1))
        return kept[key]

    # --- checkpoints ---------------------------------------------------------------------------------

    def states(self) -> list[dict]:
        """Per member: the state_dict its separate run's optimizer would save (the same dict as its
        shell's, with the member's slice of every stacked state)."""
        out = []
        for i, shell in enumerate(self.shells):
            saved = shell.state_dict()
            state = {}
            for names, packed in zip(self.names, saved["param_groups"]):
                for name, index in zip(names, packed["params"]):
                    if name in self.state and index not in state:
                        stacked = self.state[name]
                        state[index] = {
                            k: stacked[k].clone() if k == "step" else stacked[k][i].clone() for k in STATE_KEYS
                        }
            saved["state"] = state
            out.append(saved)
        return out

    def load(self, states: list[dict]) -> None:
        """Each member's state (a separate run's, or one this stack or the per-member path saved):
        its shell loads it as torch does (checks, casts, settings), then it is moved into the stack."""
        for shell, state in zip(self.shells, states):
            shell.load_state_dict(state)
        self.state = {}
        try:
            for g, names in enumerate(self.names):
                for j, name in enumerate(names):
                    own = [shell.state.get(shell.param_groups[g]["params"][j]) for shell in self.shells]
                    if all(s is None or not s for s in own):
                        continue
                    if any(s is None or not s for s in own):
                        raise ValueError(f"some members have optimizer state for '{name}' and some none")
                    steps = {float(s["step"]) for s in own}
                    if len(steps) > 1:
                        raise ValueError(f"the members' optimizer states for '{name}' stand at different steps")
                    p = self.model.stacked(name)
                    stacked = _new_state(p)
                    stacked["step"].copy_(own[0]["step"])
                    for key in ("exp_avg", "exp_avg_sq"):
                        for i, s in enumerate(own):
                            stacked[key][i].copy_(s[key])
                    self.state[name] = stacked
        finally:
            for shell in self.shells:
                shell.state.clear()


def _slices(p: torch.Tensor, most: int) -> list[tuple[int, int]]:
    """The members of p in slices of at most `most` bytes (one member at least)."""
    per_member = max(p[0].numel() * p.element_size(), 1)
    size = max(most // per_member, 1)
    return [(i, min(i + size, len(p))) for i in range(0, len(p), size)]


def _new_state(p: torch.Tensor) -> dict:
    """As torch's Adam starts a parameter's state (its step a float32 tensor on the CPU)."""
    dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
    return {
        "step": torch.tensor(0.0, dtype=dtype, device="cpu"),
        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
    }
