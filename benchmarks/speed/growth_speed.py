"""Growth speed: a ~100M-parameter Nexusformer grown by dM/dA including its AdamW state.

    python benchmarks/speed/growth_speed.py [--layers 7 --d-model 768 --m 780 --a 960 --delta-m 308 --delta-a 268]

Default shape: the paper's 240M width (d=768, M=780, A=960, FFN 2048, vocab 32000, tied) with 7
layers, ~106M parameters; the growth goes towards the 300M target (M 1088, A 1228). Times
`nexus.growth.grow` (new model, inherited weights, new optimizer, transplanted per-element state)
and, as the same-process reference, one deepcopy of the model plus a clone of its optimizer state
(the cost of merely duplicating the training state). Target: growth <= 5 s on CPU. Wall and CPU
seconds are both printed: on a shared, oversubscribed machine the CPU time is the honest cost.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

from nexus.config import ModelConfig, ProjectionOptions, RunConfig, TrainConfig
from nexus.growth import grow
from nexus.models import build_model
from nexus.optim.param_groups import build_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _result
from _harness import StepTimer, emit, print_machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=7)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--m", type=int, default=780)
    ap.add_argument("--a", type=int, default=960)
    ap.add_argument("--delta-m", type=int, default=308)
    ap.add_argument("--delta-a", type=int, default=268)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0 = torch default; 1 avoids spin-waits on a busy machine)",
    )
    args = ap.parse_args()
    print_machine()  # CPU model and capability beside the figures below
    if args.threads:
        torch.set_num_threads(args.threads)
    proj = ProjectionOptions.make("nexus_rank", rank_m=args.m, rank_a=args.a)
    cfg = RunConfig(
        model=ModelConfig(
            d_model=args.d_model,
            n_layers=args.layers,
            n_heads=12,
            vocab_size=32000,
            ffn_hidden=2048,
            max_seq_len=512,
            projection=proj,
        ),
        train=TrainConfig(optimizer=args.optimizer),
    )
    cfg.data.seq_len = 512
    torch.manual_seed(0)
    model = build_model(cfg.model)
    n_params = sum(p.numel() for p in model.parameters())
    opt = build_optimizer(model, cfg.train)
    for p in model.parameters():  # one step with random gradients: every tensor gets its full state
        p.grad = torch.randn_like(p) * 1e-3
    opt.step()
    state = opt.state_dict()

    with StepTimer() as ref:
        ref_model = copy.deepcopy(model)
        ref_state = {
            k: {kk: vv.clone() if torch.is_tensor(vv) else vv for kk, vv in v.items()}
            for k, v in state["state"].items()
        }
    t_ref, c_ref = ref.elapsed.wall, ref.elapsed.cpu
    del ref_model, ref_state

    with StepTimer() as growth:
        new_model, new_cfg, new_opt, res = grow(
            model, cfg, {"family": "nexus_rank", "delta_m": args.delta_m, "delta_a": args.delta_a}, state, step=1000
        )
    t_grow, c_grow = growth.elapsed.wall, growth.elapsed.cpu
    n_new = sum(p.numel() for p in new_model.parameters())
    print(
        f"model: {n_params / 1e6:.1f}M -> {n_new / 1e6:.1f}M parameters "
        f"(M {args.m}->{args.m + args.delta_m}, A {args.a}->{args.a + args.delta_a}, {args.layers} layers, "
        f"optimizer {args.optimizer}, threads {torch.get_num_threads()})"
    )
    print(f"growth incl. optimizer state: {t_grow:.2f} s wall, {c_grow:.2f} s CPU  (target <= 5 s)")
    print(
        f"reference (deepcopy model + clone optimizer state): {t_ref:.2f} s wall, {c_ref:.2f} s CPU; "
        f"ratio growth/reference {t_grow / t_ref:.2f} (wall), {c_grow / c_ref:.2f} (CPU)"
    )
    emit(
        f"Nexus-Rank growth incl. optimizer state, {n_params / 1e6:.0f}M -> {n_new / 1e6:.0f}M parameters",
        [t_grow],
        "<= 5 s",
        unit="s",
        met=t_grow <= 5,
        cpu_s=round(c_grow, 3),
        reference_wall_s=round(t_ref, 3),
        reference_cpu_s=round(c_ref, 3),
    )


if __name__ == "__main__":
    main()
