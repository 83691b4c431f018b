"""Every preset's model against the code of another revision, bitwise: parameter names and order, shapes
and dtypes, seeded initialization, logits, every gradient and greedy generation (issue 25: the redesign
must keep them for every preset).

    python benchmarks/regressions/bitwise_presets.py [--reference REV] [--full-under 50e6] [--only TEXT]

The reference revision is checked out with `git worktree add --detach` (default /tmp/nexus-before) and
each side runs in its own process with its own `src` on PYTHONPATH, one thread. Both sides build the
*same* model config: this tree's preset, written in the reference's config form where that form differs
(attention/projection/MLP kinds as flat sections, the architecture as a name), so a preset whose \
definition changed on purpose is
still compared on what the code does with it. The reference's own preset config is compared too and
a difference is reported beside the result.

Cost: a preset under --full-under parameters is checked whole. A larger one (up to 2.6 B parameters: two
sides x init + gradients would not fit or finish on a small CPU machine) is checked in two parts: the
whole model built on the meta device (names, order, shapes, dtypes of every parameter and buffer), and a
copy cut to 2 layers at full width built for real (seeded init, logits, gradients, generation). Input:
2 sequences of 8 token ids (seeded); generation: 4 tokens greedy from the first 4.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, emit, print_machine  # noqa: E402
from _revisions import BEFORE_REDESIGN, ROOT, checkout  # noqa: E402

SEQ, BATCH, PROMPT, NEW = 8, 2, 4, 4
REDUCED_LAYERS = 2


# ----------------------------------------------------------------------------- worker (either revision)
def _digest(t) -> str:
    import torch

    t = t.detach().cpu().contiguous().reshape(-1)
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def _old_form(model: dict, new_defaults: dict, old_cls) -> tuple[dict, list[str]]:
    """This tree's model dict in the reference's form (flat attention/projection/MoE sections, arch a name); fields the
    reference lacks are dropped when at their default, else refused (returned as problems)."""
    import dataclasses

    m, problems = copy.deepcopy(model), []
    att = m.get("attention", {})
    kind = att.pop("kind", "standard")
    if kind == "standard":
        att["order"] = 1
    elif kind != "higher_order":
        problems.append(f"attention kind {kind!r} has no reference form")
    arch = m.get("arch")
    if isinstance(arch, dict):  # {kind, **options} -> the architecture's name and model.recurrent
        ak = arch.pop("kind", "transformer")
        m["arch"] = ak
        if ak == "recurrent":
            m["recurrent"] = arch
        elif ak != "transformer" or arch:
            problems.append(f"arch kind {ak!r} has no reference form")
    mlp = m.pop("mlp", None)
    if isinstance(mlp, dict):
        mk = mlp.pop("kind", "dense")
        if mk == "moe":
            m["moe"] = mlp
        elif mk != "dense" or mlp:
            problems.append(f"mlp kind {mk!r} has no reference form")
    import typing

    hints = typing.get_type_hints(old_cls)
    for k in list(m):
        if k not in hints:
            if m[k] != new_defaults.get(k):
                problems.append(f"model.{k}={m[k]!r} has no reference field")
            del m[k]
        elif isinstance(m[k], dict) and dataclasses.is_dataclass(hints[k]):
            fields = {f.name for f in dataclasses.fields(hints[k])}
            for kk in [kk for kk in m[k] if kk not in fields]:
                if m[k][kk] != (new_defaults.get(k) or {}).get(kk):
                    problems.append(f"model.{k}.{kk}={m[k][kk]!r} has no reference field")
                del m[k][kk]
    return m, problems


def _model_config(model_dict: dict, new_defaults: dict):
    """(this side's ModelConfig for a model dict of this tree's form, or None, why not)."""
    from nexus import config as C

    if not hasattr(C, "KindOptions"):  # the reference's form: kinds as flat sections
        model_dict, problems = _old_form(model_dict, new_defaults, C.ModelConfig)
        if problems:
            return None, "; ".join(problems)
    return C.RunConfig.from_dict({"model": model_dict}).model, None


def run_case(name: str, model_dict: dict, new_defaults: dict, reduced: bool) -> dict:
    import torch

    from nexus.models import build_model
    from nexus.presets import get_preset

    cfg, why = _model_config(copy.deepcopy(model_dict), new_defaults)
    if cfg is None:
        return {"skip": why}
    out = {"own_preset": cfg == get_preset(name).model if name in _preset_names() else None}
    with torch.device("meta"):
        meta = build_model(cfg)
    out["structure"] = [(k, list(v.shape), str(v.dtype)) for k, v in meta.state_dict().items()]
    out["param_order"] = [k for k, _ in meta.named_parameters()]
    del meta
    if reduced:
        cfg, _ = _model_config({**copy.deepcopy(model_dict), "n_layers": REDUCED_LAYERS}, new_defaults)
    torch.manual_seed(0)
    model = build_model(cfg)
    out["init"] = [(k, _digest(p)) for k, p in model.named_parameters()]
    ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)
    res = model(ids, labels=ids)
    res.loss.backward()
    out["logits"] = _digest(res.logits)
    out["loss"] = float(res.loss).hex()
    out["grads"] = [(k, None if p.grad is None else _digest(p.grad)) for k, p in model.named_parameters()]
    with torch.no_grad():
        out["generation"] = model.eval().generate(ids[:1, :PROMPT], max_new_tokens=NEW, temperature=0.0).tolist()
    return out


def _preset_names() -> set:
    from nexus.presets import names

    return set(names())


def worker(job: Path, result: Path) -> None:
    import torch

    torch.set_num_threads(1)
    spec = json.loads(job.read_text())
    results = {}
    for case in spec["cases"]:
        clock = StepTimer().start()
        try:
            results[case["name"]] = run_case(case["name"], case["model"], spec["defaults"], case["reduced"])
        except Exception as e:  # a preset one side cannot build is a result, not the end of the run
            results[case["name"]] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        results[case["name"]]["seconds"] = round(clock.so_far().wall, 2)
        result.write_text(json.dumps(results))  # after each case: a killed run keeps what it finished


# ----------------------------------------------------------------------------- driver
def _first_difference(a: dict, b: dict) -> str | None:
    for key in ("structure", "param_order", "init", "logits", "loss", "grads", "generation"):
        if key not in a and key not in b:
            continue
        if a.get(key) != b.get(key):
            if isinstance(a.get(key), list) and isinstance(b.get(key), list):
                for x, y in zip(a[key], b[key]):
                    if x != y:
                        return f"{key}: {x} != {y}"
                return f"{key}: {len(a[key])} entries vs {len(b[key])}"
            return f"{key}: {a.get(key)} != {b.get(key)}"
    return None


def _side(src: Path, cases: list, defaults: dict, tmp: Path, label: str) -> dict:
    job, result = tmp / f"{label}_job.json", tmp / f"{label}_result.json"
    job.write_text(json.dumps({"cases": cases, "defaults": defaults}))
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "NEXUS_DISABLE_PLUGINS": "1"}
    with StepTimer() as t:
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", str(job), str(result)],
            env=env,
            cwd=tmp,
            capture_output=True,
            text=True,
        )
    if proc.returncode != 0:
        print(f"{label} worker failed: {proc.stderr[-2000:]}", file=sys.stderr)
    print(f"{label}: {len(cases)} presets in {t.elapsed.wall:.0f} s ({src})", flush=True)
    return json.loads(result.read_text()) if result.is_file() else {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", default=BEFORE_REDESIGN, help="revision to compare against (default: %(default)s)")
    ap.add_argument("--worktree", default="/tmp/nexus-before", help="where the reference is checked out")
    ap.add_argument("--full-under", type=float, default=50e6, help="presets with fewer parameters are checked whole")
    ap.add_argument("--only", default="", help="only presets whose name contains this")
    ap.add_argument("--worker", nargs=2, metavar=("JOB", "RESULT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(Path(args.worker[0]), Path(args.worker[1]))
        return 0
    sys.path.insert(0, str(ROOT / "src"))
    from nexus.analysis.param_formula import count
    from nexus.config import ModelConfig, to_dict
    from nexus.presets import get_preset, names

    print_machine()  # CPU model and capability beside the results below
    ref, head, here = checkout(args.worktree, args.reference)
    cases = []
    for name in names():
        if args.only and args.only not in name:
            continue
        model = get_preset(name).model
        cases.append(
            {
                "name": name,
                "model": to_dict(model),
                "reduced": count(model)["total"] >= args.full_under,
                "params": count(model)["total"],
            }
        )
    defaults = to_dict(ModelConfig())
    with tempfile.TemporaryDirectory() as tmp:
        new = _side(ROOT / "src", cases, defaults, Path(tmp), "this tree")
        old = _side(ref / "src", cases, defaults, Path(tmp), f"reference {head}")
    equal = differ = no_ref = 0
    print(f"\n{'preset':<28} {'params':>9}  {'checked':<22} result")
    for case in cases:
        n = case["name"]
        a, b = new.get(n, {"error": "not run"}), old.get(n, {"error": "not run"})
        how = f"meta + {REDUCED_LAYERS}-layer copy" if case["reduced"] else "whole model"
        if "error" in a:
            verdict = f"ERROR here: {a['error']}"
            differ += 1
        elif "skip" in b or "error" in b:
            verdict = f"no reference: {b.get('skip') or b.get('error')}"
            no_ref += 1
        else:
            d = _first_difference(a, b)
            verdict = "equal" if d is None else f"DIFFERS {d}"
            if b.get("own_preset") is False:
                verdict += " (the reference's own preset of this name is another model config)"
            elif b.get("own_preset") is None:
                verdict += " (a preset the reference lacks)"
            equal += d is None
            differ += d is not None
        print(f"{n:<28} {case['params'] / 1e6:>8.2f}M  {how:<22} {verdict}")
    print(
        f"\n{equal} of {len(cases)} presets equal to {head} (this tree {here}), {differ} differ, {no_ref} without a "
        f"reference form; full-under {args.full_under:.0e}"
    )
    emit(
        "presets bitwise equal to the reference",
        [equal],
        "all equal",
        unit="presets",
        met=differ == 0,
        presets=len(cases),
        differ=differ,
        without_reference=no_ref,
        reference=head,
        tree=here,
    )
    return 0 if differ == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
