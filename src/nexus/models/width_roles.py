"""Width-growth roles: which tensors of a model grow along which axis, declared by the modules themselves.

Width growth (growth/width.py, SPARKLING) needs, for every parameter, which of its dimensions run along
a growable axis and in which role:
  axes   hidden (d_model), ffn (the dense FFN's inner size), expert_inner (an MoE expert's inner size)
  roles  out   fan-out: new entries along this dim produce the new channels
         gate  a fan-out paired with an `out` sibling (SwiGLU's gate: never zero together with up)
         in    fan-in: new entries read the new channels (the only dims that are rescaled)
         gain  an RMSNorm gain over the axis

A module says it with one of two methods, found by walking the model (so a new kind declares its roles
in its own file and nothing central lists parameter names):
  width_roles(self) -> {relative parameter name: {dim: (axis, role)}}
      for its own parameters and its children's; a projection child is described through `port`
  width_refusal(self, spec) -> str | None
      why this module cannot be width-grown (under `spec`: a WidthSpec), one line ending in what
      would work, or None when it can
A parent's declaration of a parameter wins over the child's own (an MoE expert's inner axis is
expert_inner, not the ffn its SwiGLU would say).
"""

from __future__ import annotations

import torch.nn as nn

Roles = dict[int, tuple[str, str]]  # dim -> (axis, role)


def port(module: nn.Module, side: str, axis: str, role: str) -> dict[str, Roles]:
    """The roles of a projection whose input (side "in") or output (side "out") runs along `axis`.
    nn.Linear is the baseline projection; another projection kind says where its input and output
    sides sit with `width_ports = {"in": (param name, dim), "out": (param name, dim)}`. A module with
    neither gives no roles (width growth then refuses the model, naming the parameter)."""
    if isinstance(module, nn.Linear):
        return {"weight": {1 if side == "in" else 0: (axis, role)}}
    ports = getattr(module, "width_ports", None)
    if not ports:
        return {}
    name, dim = ports[side]
    return {name: {dim: (axis, role)}}


def prefixed(prefix: str, roles: dict[str, Roles]) -> dict[str, Roles]:
    return {f"{prefix}.{name}": r for name, r in roles.items()}


def collect_roles(model: nn.Module) -> dict[str, Roles]:
    """{parameter name: roles} over the whole model, from every module's `width_roles`."""
    out: dict[str, Roles] = {}
    for name, module in model.named_modules():
        declare = getattr(module, "width_roles", None)
        if declare is None:
            continue
        for rel, roles in declare().items():
            out.setdefault(f"{name}.{rel}" if name else rel, roles)  # the outermost declaration wins
    return out


def collect_refusals(model: nn.Module, spec) -> list[tuple[str, str]]:
    """(module name, reason) for every module that refuses width growth under `spec`."""
    out = []
    for name, module in model.named_modules():
        refuse = getattr(module, "width_refusal", None)
        why = refuse(spec) if refuse is not None else None
        if why:
            out.append((name or "model", why))
    return out
