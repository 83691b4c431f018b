"""`nexus analyze KIND`: analyses of a checkpoint (or of a preset's freshly initialized model).

    nexus analyze attention --checkpoint runs/exo-e-tiny/checkpoint
    nexus analyze params --preset exo-dynamic-e-450m

Each kind writes `<kind>.json` (the numbers) and PNG plots into --out (default
runs/analysis/<name>/<kind>), through a temporary directory renamed into place.

To add a kind, add one `Analysis` line to ANALYSES naming a function
`fn(src: AnalysisSource, out_dir: Path, args) -> dict`; the dict is the JSON written and printed.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..outdir import ANALYSIS
from .common import positive_int


@dataclass(frozen=True)
class Analysis:
    target: str  # "module:function" imported only when this kind runs
    help: str  # one line shown by `nexus analyze --help`


ANALYSES: dict[str, Analysis] = {
    "attention": Analysis("nexus.cli.analyze:attention_kind",
                          "per-layer attention entropy, first-token sink share, gate activation, first-layer gate "
                          "selectivity (Fig. 5b) (+ higher-order maps)"),
    "mixing": Analysis("nexus.cli.analyze:mixing_kind", "lambda1/lambda2 heatmaps per component, layer and channel/head; "
                       "mean ratio per layer (Fig. 4); share of |lambda1| < 0.001 (App. C.1)"),
    "representations": Analysis("nexus.cli.analyze:representations_kind",
                                "cross-layer cosine, token-token similarity, effective rank, refinement-stage share, "
                                "anchor removal"),
    "params": Analysis("nexus.cli.analyze:params_kind", "parameter counts (no weights allocated)"),
    "flops": Analysis("nexus.cli.analyze:flops_kind", "forward/training FLOPs per token by top-level module"),
    "growth": Analysis("nexus.analysis.growth_plots:growth_kind",
                       "growth dynamics over --checkpoints A B C [--checkpoints D E F ...]: NOC, U_P, R, harmonic "
                       "fit, Fisher g, standardized PCA; several runs pooled for PCA and scaling fit"),
}


def add_parser(sub) -> None:
    kinds = "\n".join(f"  {k:<16} {a.help}" for k, a in ANALYSES.items())
    import argparse

    p = sub.add_parser("analyze", help="analyses of a checkpoint or preset (attention, mixing, representations, ...)",
                       description=f"Analyses; each writes <kind>.json and PNG plots.\n\nkinds:\n{kinds}",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", metavar="KIND", help=f"one of: {', '.join(ANALYSES)}")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", metavar="DIR", help="checkpoint directory to analyse")
    src.add_argument("--preset", metavar="NAME", help="analyse a preset's freshly initialized model (overrides allowed)")
    p.add_argument("--out", metavar="DIR", default=None, help="output directory (default runs/analysis/<name>/<kind>)")
    p.add_argument("--checkpoints", nargs="+", action="append", metavar="DIR", default=None,
                   help="growth: checkpoints of one grown run in training order (the first at the growth); "
                        "repeat the flag once per run to pool PCA and scaling fit across runs")
    p.add_argument("--noc-reading", choices=["whole", "corner"], default="whole",
                   help="growth: NOC/U_P compare the base matrix with the whole grown matrix (default, Table 4's "
                        "magnitudes) or the pretrained corner with the new entries")
    p.add_argument("--pca", choices=["standardized", "covariance"], default="standardized",
                   help="growth: PCA of the correlation matrix (default, reproduces Table 5) or of the covariance")
    p.add_argument("--batches", type=positive_int("--batches"), default=4, help="validation batches fed through the model")
    p.add_argument("--batch-size", type=positive_int("--batch-size"), default=4, help="sequences per batch")
    p.add_argument("--seq-len", type=positive_int("--seq-len"), default=None, help="tokens per sequence (default: data.seq_len)")
    p.add_argument("--counting", choices=["analytic", "calflops"], default="analytic",
                   help="flops: analytic (matmuls and attention products) or calflops (also norms, activations, "
                        "softmax and elementwise ops, as CalFlops counts them; Nexusformer Table 8)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier nexus output of the same kind at --out")
    p.set_defaults(func=run, accepts_overrides=True)


class AnalysisSource:
    """Where the model comes from: a checkpoint (weights + tokenizer) or a preset (random init)."""

    def __init__(self, args, extra: list[str]):
        from ..config import ConfigError, parse_overrides

        self.args = args
        if not args.checkpoint and not args.preset and getattr(args, "checkpoints", None):
            args.checkpoint = args.checkpoints[-1][-1]  # `growth` reads all of them; the last names the output
        if args.checkpoint:
            from ..checkpoint import read_config

            self.cfg = read_config(args.checkpoint)
            path = Path(args.checkpoint)
            self.name = path.parent.name if path.name == "checkpoint" else path.name
        else:
            from ..presets import get_preset

            if not args.preset:
                raise ConfigError("nexus analyze needs --checkpoint DIR or --preset NAME (valid: one of them)")
            self.cfg = get_preset(args.preset)
            self.name = args.preset
        parse_overrides(self.cfg, extra)
        if args.seq_len:
            self.cfg.data.seq_len = args.seq_len
        self.cfg.validate()
        self._model = self._tok = None

    def model(self):
        if self._model is None:
            if self.args.checkpoint:
                from ..checkpoint import load_checkpoint

                self._model, ckpt_cfg, self._tok = load_checkpoint(self.args.checkpoint)
                self.cfg.model = ckpt_cfg.model
            else:
                import torch

                from ..models import build_model

                torch.manual_seed(self.cfg.train.seed)
                self._model = build_model(self.cfg.model)
            self._model.eval()
        return self._model

    def batches(self) -> list:
        from ..config import ConfigError
        from ..data.loader import DataModule

        model = self.model()
        data = DataModule(self.cfg.data, seed=self.cfg.train.seed, tokenizer=self._tok)
        if data.vocab_size > model.cfg.vocab_size:
            raise ConfigError(f"data.tokenizer gives {data.vocab_size} tokens but model.vocab_size="
                              f"{model.cfg.vocab_size} (valid: the tokenizer the model was built for)")
        return list(data.val_batches(self.args.batches, self.args.batch_size))


def resolve(kind: str):
    from ..config import ConfigError

    if kind not in ANALYSES:
        raise ConfigError(f"KIND={kind!r} (valid: {'|'.join(ANALYSES)})")
    module, fn = ANALYSES[kind].target.split(":")
    return getattr(importlib.import_module(module), fn)


def run(args, extra) -> int:
    from ..checkpoint import atomic_dir_write
    from ..outdir import check_output

    fn = resolve(args.kind)
    src = AnalysisSource(args, extra)
    out = Path(args.out) if args.out else Path("runs") / "analysis" / src.name / args.kind
    runs = args.checkpoints or []  # --checkpoints may be given once per growth run: a list of lists
    sources = [args.checkpoint, *(d for run_dirs in runs for d in run_dirs)]
    check_output(out, ANALYSIS, overwrite=args.overwrite, sources=sources)
    result: dict = {}

    def write(tmp: Path) -> None:
        result.update(fn(src, tmp, args))
        (tmp / f"{args.kind}.json").write_text(json.dumps(result, indent=2))

    atomic_dir_write(out, write, marker_kind=ANALYSIS)
    if args.json:
        print(json.dumps({"kind": args.kind, "out": str(out), **result}))
    else:
        print(summarize(args.kind, result))
        print(f"wrote {out}/{args.kind}.json" + (f" and {len(result.get('plots', []))} PNG plots" if result.get("plots") else ""))
    return 0


def summarize(kind: str, result: dict) -> str:
    """A short human-readable table of the main numbers."""
    def fmt(v):
        return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)

    if kind == "attention":
        rows = ["layer  entropy  sink_share  gate_act"]
        for i, l in enumerate(result["layers"]):
            rows.append(f"{l:>5}  {fmt(result['entropy'][i]):>7}  {fmt(result['sink_share'][i]):>10}  "
                        f"{fmt(result['gate_activation'][i]):>8}")
        sel = result.get("first_layer_gate")
        if sel:
            rows.append(f"first-layer gate: mean {sel['mean']:.4f}, share < 0.1 {sel['share_below_0.1']:.3f}, "
                        f"share > 0.9 {sel['share_above_0.9']:.3f}")
        return "\n".join(rows)
    if kind == "representations":
        rows = ["layer  token_sim  eff_rank"]
        for i, l in enumerate(result["layers"]):
            rows.append(f"{l:>5}  {fmt(result['token_similarity'][i]):>9}  {fmt(result['effective_rank'][i]):>8}")
        ref = result.get("refinement_stage", {})
        if ref.get("share") is not None:
            rows.append(f"refinement stage: token-similarity minimum after layer {ref['onset_layer']}, "
                        f"{ref['refinement_layers']}/{ref['n_layers']} layers ({ref['share']:.2f})")
        else:
            rows.append("refinement stage: no interior local minimum of token similarity")
        rem = result.get("anchor_removal", {})
        if rem.get("available"):
            rows.append(f"anchor removal: val loss {rem['loss_before']:.4f} -> {rem['loss_after']:.4f}, final-layer token "
                        f"similarity {rem['token_similarity_before'][-1]:.3f} -> {rem['token_similarity_after'][-1]:.3f}")
        return "\n".join(rows)
    if kind == "mixing":
        if not result["components"]:
            return "no anchor mixing in this model (model.mixing.anchor is none)"
        rows = ["component  layer  mean(lambda1)  mean(lambda2)  mean(lambda1/lambda2)"]
        for c, d in result["ratio_by_layer"].items():
            for i, l in enumerate(d["layers"]):
                rows.append(f"{c:>9}  {l:>5}  {d['mean_lambda1'][i]:>13.4f}  {d['mean_lambda2'][i]:>13.4f}  "
                            f"{d['mean_ratio'][i]:>21.4f}")
        nz = result["near_zero_lambda1"]
        rows.append(f"near-zero lambda1 (|lambda1| < {nz['threshold']}): {nz['all']:.4f} of all; "
                    + ", ".join(f"{c} {v:.4f}" for c, v in nz["per_component"].items()))
        return "\n".join(rows)
    return "\n".join(f"{k}: {fmt(v)}" for k, v in result.items() if not isinstance(v, (dict, list)))


# ----------------------------------------------------------------------------- kinds
def attention_kind(src: AnalysisSource, out_dir: Path, args) -> dict:
    from ..analysis.attention_stats import attention_statistics, plot_attention_statistics

    from ..analysis.exo_findings import plot_gate_selectivity

    model, batches = src.model(), src.batches()
    stats = attention_statistics(model, batches)
    stats["plots"] = plot_attention_statistics(stats, out_dir)
    if stats["first_layer_gate"] is not None:
        stats["first_layer_gate_mean"] = stats["first_layer_gate"]["mean"]
        stats["plots"] += plot_gate_selectivity(stats["first_layer_gate"], out_dir, stats["layers"][0])
    if model.cfg.attention.order > 1:  # higher-order attention: the Nexus paper's outer/inner maps
        try:
            from ..analysis.attention_maps import write_attention_maps
        except ImportError:
            write_attention_maps = None
        if write_attention_maps is not None:
            stats["attention_maps"] = write_attention_maps(model, batches[0][0], out_dir)
    return stats


def mixing_kind(src: AnalysisSource, out_dir: Path, args) -> dict:
    from ..analysis.attention_stats import mixing_coefficients, plot_mixing_coefficients

    from ..analysis.exo_findings import lambda_ratio_by_layer, near_zero_anchor_share, plot_lambda_ratio_by_layer

    coefs = mixing_coefficients(src.model())
    by_layer = lambda_ratio_by_layer(coefs)
    return {"anchor": src.cfg.model.mixing.anchor, "granularity": src.cfg.model.mixing.granularity,
            "components": coefs, "ratio_by_layer": by_layer,
            "near_zero_lambda1": near_zero_anchor_share(coefs) if coefs else None,
            "plots": plot_mixing_coefficients(coefs, out_dir) + plot_lambda_ratio_by_layer(by_layer, out_dir)}


def representations_kind(src: AnalysisSource, out_dir: Path, args) -> dict:
    from ..analysis.representations import anchor_removal, plot_representations, representation_statistics

    from ..analysis.exo_findings import refinement_stage

    model, batches = src.model(), src.batches()
    stats = representation_statistics(model, batches)
    stats["refinement_stage"] = refinement_stage(stats["token_similarity"])
    stats["anchor_removal"] = anchor_removal(model, batches)
    stats["plots"] = plot_representations(stats, stats["anchor_removal"], out_dir)
    return stats


def params_kind(src: AnalysisSource, out_dir: Path, args) -> dict:
    from ..models.accounting import param_count_for_config

    return param_count_for_config(src.cfg.model)


def flops_kind(src: AnalysisSource, out_dir: Path, args) -> dict:
    from ..models.accounting import build_on_meta
    from ..analysis.flops import flops_breakdown

    from ..analysis.flops import calflops_like_counts

    seq = src.cfg.data.seq_len
    model = build_on_meta(src.cfg.model)
    parts = flops_breakdown(model, seq)
    out = {"seq_len": seq, "counting": args.counting, "forward_flops_per_token": parts["total"],
           "train_flops_per_token": 3 * parts["total"], "breakdown": parts}
    if args.counting == "calflops":  # matmuls plus norms, activations, softmax and elementwise ops
        cal = calflops_like_counts(model, seq)
        out.update({"forward_flops_per_token": cal["total"], "train_flops_per_token": 3 * cal["total"],
                    "analytic_forward_flops_per_token": parts["total"], "calflops_categories": cal})
    return out
