"""The model of a stack of K members, in two kinds with one interface: `Stacked` and `Alone`.

`Stacked(models)` holds K models' parameters stacked on a leading member axis
(torch.func.stack_module_state) and maps inputs [K, batch, ...] to logits [K, batch, classes],
the forward vmapped over the member axis (or the model's own `forward_stacked`). The loop sums
the K per-member mean losses, so each slice of a stacked gradient is exactly that member's own
gradient; an optimizer or filter that treats every element on its own (Adam, AdamW, SGD,
Adam-LR, Grokfast) then makes each member's update the one its separate run would make. A single
run of such a cell is the stack of one, and on CPU a member of a larger stack makes its matrix
products alone too (Stacked.forward), so it takes the same kernels: on CPU with one thread the
results are equal bit for bit; with more threads or on a GPU a kernel may split a sum differently
for another stacked shape, and they agree to float rounding (tests/test_stack.py, README "Many
seeds at once").

`Alone(model)` is one model as it is, for a member that cannot stack exactly (suite/engine/plan.py
says which and why): the same interface over a member axis of one, no vmap.

Checkpoints are per member, in the format of a separate run: `split` takes member i's slice of
every stacked tensor of a state (model, optimizer or filter), `join` puts K of them back.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.func import functional_call, stack_module_state


class Stacked(nn.Module):
    def __init__(self, models: list[nn.Module]):
        super().__init__()
        self.size = len(models)
        first = models[0]
        names = {id(p): n for n, p in first.named_parameters()}
        self._embedding = names.get(id(getattr(first, "embedding_weight", None)))
        self._coupled = names.get(id(getattr(first, "coupled_weight", None)))
        hidden = getattr(first, "hidden_weights", None)
        self._hidden = None if hidden is None else [names[id(p)] for p in hidden]
        params, buffers = stack_module_state(models)
        self._names = list(params)  # the members' own parameter order, so optimizer state lines up
        for name, value in params.items():
            self.register_parameter(_key(name), nn.Parameter(value))
        for name, value in buffers.items():
            self.register_buffer(_key(name), value)
        self._buffer_names = list(buffers)
        self._state_names = list(first.state_dict())
        self.__dict__["base"] = copy.deepcopy(first).to("meta")  # the architecture; not a submodule

    def train(self, mode: bool = True):
        self.base.train(mode)
        return super().train(mode)

    def stacked(self, name: str) -> torch.Tensor:
        return getattr(self, _key(name))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [K, batch, ...] -> logits [K, batch, classes]. On CPU each member runs the model's own
        forward on its slice of the stack, so it makes the very calls its separate run makes: torch
        hands a batch of K > 1 matrix products to MKL's batched gemm and one product to its plain
        gemm, which MKL computes apart for some shapes, which shapes depending on the CPU (a product
        with one column on an AMD EPYC; MLPs of width 32 and 64 elsewhere). On a GPU, where members
        agree to rounding anyway, the whole stack goes through one batched call (vmap, or the model's
        own forward_stacked) for speed."""
        if x.device.type != "cpu":
            return self.batched(x)
        tensors = {n: self.stacked(n) for n in self._names + self._buffer_names}
        # unbind, not indexing: its backward is one stack, where K indexings would each fill a full-size zero tensor
        members = [dict(zip(tensors, ts)) for ts in zip(*(t.unbind() for t in tensors.values()))]
        return torch.stack([self._member_forward(member, xi) for member, xi in zip(members, x)])

    def batched(self, x: torch.Tensor) -> torch.Tensor:
        """The whole stack in one batched call: the model's own forward_stacked (models/mlp.py), or
        its forward vmapped over the member axis (which fails for a model whose ops have no
        batching rule)."""
        tensors = {n: self.stacked(n) for n in self._names + self._buffer_names}
        if hasattr(self.base, "forward_stacked"):
            return self.base.forward_stacked({n: tensors[n] for n in self._names}, x)
        return torch.vmap(self._member_forward)(tensors, x)

    def _member_forward(self, tensors: dict, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.base, tensors, (x,))

    def check_batched(self, x: torch.Tensor) -> None:
        """The batched forward and backward once on x, the global RNG untouched: raises, on any
        device, for a model whose ops have no vmap batching rule."""
        params = [self.stacked(n) for n in self._names]
        with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
            out = self.batched(x)
            torch.autograd.grad(out, params, torch.ones_like(out), allow_unused=True)

    def lay_out_like_gradients(self, x: torch.Tensor) -> None:
        """Store each stacked parameter in the memory layout its gradient has when it leaves the
        stacked backward (on a GPU a Linear weight's comes out transposed; on CPU the members'
        gradients are joined by one stack, contiguous), found by one backward pass on x. Autograd
        then takes every step's gradient as it is instead of copying it into the parameter's layout
        (~0.5 ms of a 10 ms MLP step on a batched backward). Only where elements live changes: the
        values, and every result, stay the same. Call it before the optimizer exists."""
        params = [self.stacked(n) for n in self._names]
        with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
            out = self(x)
            grads = torch.autograd.grad(out, params, torch.ones_like(out), allow_unused=True)
        with torch.no_grad():
            for p, g in zip(params, grads):
                if g is not None and g.stride() != p.stride() and _outer_first(g).is_contiguous():
                    p.data = torch.empty_strided(p.shape, g.stride(), dtype=p.dtype, device=p.device).copy_(p)

    @property
    def embedding_weight(self):
        return self.stacked(self._embedding) if self._embedding else None

    @property
    def coupled_weight(self):
        return self.stacked(self._coupled) if self._coupled else None

    def stacked_weights(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """E and W with the member axis first, detached."""
        E, W = self.embedding_weight, self.coupled_weight
        return (None if E is None else E.detach()), (None if W is None else W.detach())

    def member_grads(self) -> list[torch.Tensor]:
        """The gradients, member axis first."""
        return [p.grad for p in self.parameters() if p.grad is not None]

    def embedding_grads(self) -> list[torch.Tensor]:
        """Each member's token-embedding gradient (vocab x d), a view into the stacked one."""
        return list(self.embedding_weight.grad)

    def member_params(self) -> list[torch.Tensor]:
        return list(self.parameters())

    def alone(self) -> nn.Module:
        """The stack of one as a plain model for measures that differentiate through it (the
        Hessian): inputs [batch, ...] -> logits [batch, classes], computed by the same stacked
        kernels as training, with E and W the stacked parameters (a leading axis of 1)."""
        assert self.size == 1, "alone() is the stack of one"
        return _OneOfStack(self)

    @torch.no_grad()
    def keep(self, members: list[int]) -> None:
        """Go on with these members only (the others stopped early). The parameters are new
        tensors: build the optimizer and filter again and load their split states."""
        for name in self._names:
            setattr(self, _key(name), nn.Parameter(_stack_like([self.stacked(name)[i] for i in members])))
        for name in self._buffer_names:
            setattr(self, _key(name), _stack_like([self.stacked(name)[i] for i in members]))
        self.size = len(members)

    def split(self, state) -> list:
        """Per-member states (in a separate run's format) from a state of the whole: the
        model's, the optimizer's or the filter's."""
        return split_state(state, self.size)

    def join(self, states: list):
        return stack_states(states)

    def member_state_dicts(self) -> list[dict]:
        return self.split({n: self.stacked(n).detach() for n in self._state_names})


class Alone(nn.Module):
    """One model as it is, with Stacked's interface over a member axis of one."""

    size = 1

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x[0]).unsqueeze(0)

    def lay_out_like_gradients(self, x: torch.Tensor) -> None:
        pass  # the model's own layout

    @property
    def embedding_weight(self):
        return getattr(self.model, "embedding_weight", None)

    @property
    def coupled_weight(self):
        return getattr(self.model, "coupled_weight", None)

    def stacked_weights(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        E, W = self.embedding_weight, self.coupled_weight
        return (None if E is None else E.detach()[None]), (None if W is None else W.detach()[None])

    def member_grads(self) -> list[torch.Tensor]:
        return [p.grad.unsqueeze(0) for p in self.model.parameters() if p.grad is not None]

    def embedding_grads(self) -> list[torch.Tensor]:
        return [self.embedding_weight.grad]

    def member_params(self) -> list[torch.Tensor]:
        return [p.unsqueeze(0) for p in self.model.parameters()]

    def alone(self) -> nn.Module:
        return self.model

    def keep(self, members: list[int]) -> None:
        assert members == [0], "a model alone keeps its one member or stops"

    def split(self, state) -> list:
        return [state]

    def join(self, states: list):
        return states[0]

    def member_state_dicts(self) -> list[dict]:
        return [self.model.state_dict()]


@torch.no_grad()
def clip_grad_norms(model: Stacked | Alone, max_norm: float) -> None:
    """Scale each member's gradients so that their global norm, over all of its parameters, is at
    most max_norm (torch.nn.utils.clip_grad_norm_'s rule, per member): a member clips exactly as
    its separate run does."""
    grads = model.member_grads()
    if not grads:
        return
    # Both norms reduce along the last axis, one row per member: a row's sum then runs in the same
    # order whatever K is (reducing along the first axis summed a K = 1 stack in another order).
    norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads], dim=1)  # [K, params]
    scale = (max_norm / (torch.linalg.vector_norm(norms, dim=1) + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))


@torch.no_grad()
def finite(model: Stacked | Alone) -> torch.Tensor:
    """Per member [K]: are all its parameters finite? One sum per tensor and member: a sum is finite
    only if its terms are (or overflows near 1e38, which counts as diverged too)."""
    total = sum(p.sum(dim=list(range(1, p.dim()))) if p.dim() > 1 else p for p in model.member_params())
    return torch.isfinite(total)


class _OneOfStack(nn.Module):
    def __init__(self, stacked: Stacked):
        super().__init__()
        self.stack = stacked
        self.training = stacked.training  # so that restoring the mode afterwards restores the stack's

    embedding_weight = property(lambda self: self.stack.embedding_weight)
    coupled_weight = property(lambda self: self.stack.coupled_weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stack(x.unsqueeze(0))[0]


def _key(name: str) -> str:
    return name.replace(".", "__")  # module attribute names cannot hold dots


def split_state(state, size: int) -> list:
    """Member i's state from a stack's: every tensor that has dimensions has the member axis first
    (that is how elementwise optimizers and filters keep their state); 0-dim tensors (Adam's
    step) and plain values are shared."""

    def pick(value, i):
        if torch.is_tensor(value):
            return value[i].clone() if value.dim() else value.clone()  # clone: save only the slice
        if isinstance(value, dict):
            return {k: pick(v, i) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(pick(v, i) for v in value)
        return value

    return [pick(state, i) for i in range(size)]


def stack_states(states: list):
    """The inverse of split_state."""
    first = states[0]
    if torch.is_tensor(first):
        return _stack_like(states) if first.dim() else first
    if isinstance(first, dict):
        return {k: stack_states([s[k] for s in states]) for k in first}
    if isinstance(first, (list, tuple)):
        return type(first)(stack_states(list(column)) for column in zip(*states))
    return first


def _outer_first(t: torch.Tensor) -> torch.Tensor:
    """t with its dimensions ordered by stride, outermost first (contiguous if t's layout is a
    permutation of a contiguous one, as a transposed weight's is)."""
    return t.permute(sorted(range(t.dim()), key=lambda d: -t.stride(d)))


def _stack_like(tensors: list[torch.Tensor]) -> torch.Tensor:
    """torch.stack, keeping the members' memory layout (a transposed weight stays transposed)."""
    first = tensors[0]
    order = sorted(range(first.dim()), key=lambda d: -first.stride(d))
    stacked = torch.stack([t.permute(order) for t in tensors])
    return stacked.permute(0, *(order.index(d) + 1 for d in range(first.dim())))


def shapes(model: nn.Module, data) -> tuple:
    """What must be equal across a stack's members besides their specs: every tensor's shape."""
    return (
        tuple(data.x_train.shape),
        tuple(data.x_val.shape),
        tuple(data.val_groups),
        tuple(tuple(p.shape) for p in model.parameters()),
        tuple(tuple(b.shape) for b in model.buffers()),
    )
