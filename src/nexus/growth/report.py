"""Human-readable growth report for `nexus grow`."""

from __future__ import annotations


def format_report(spec: dict, report: dict, out: str) -> str:
    lines = [f"grew ({spec.get('family')}) -> {out}"]
    for k, v in report.items():
        if k == "verify":
            continue
        if isinstance(v, float):
            v = f"{v:.6g}"
        lines.append(f"  {k}: {v}")
    ver = report.get("verify")
    if ver:
        d = ver.get("max_abs_dlogits", float("nan"))
        # an exactly preserved function prints as 0.0, not 0.000e+00: "exact" is the claim, not "small"
        lines.append(f"  verification: max |dlogits| = {'0.0 (exact)' if d == 0 else f'{d:.3e}'}")
        dead = ver.get("dead_blocks") or []
        grads = ver.get("new_block_grad_norms") or {}
        if grads:
            live = len(grads) - len(dead)
            lines.append(f"  new blocks with non-zero gradient within two probe steps: {live}/{len(grads)}")
        if dead:
            lines.append(
                f"  WARNING dead blocks (zero gradient, will never train): {', '.join(dead[:8])}"
                + (" ..." if len(dead) > 8 else "")
            )
    return "\n".join(lines)


def growth_summary(step: int, record: dict, report: dict, params_before: int, params_after: int) -> str:
    """Two readable lines for a growth inside training: what grew and how, then its diagnostics."""
    what = (
        ", ".join(f"{k} {v}" for k, v in report.items() if isinstance(v, str) and k not in ("rewarmup",))
        or "model grown"
    )
    rw = record.get("rewarmup")
    rewarm = (
        f"re-warmup of the new entries rho {rw['rho']} over {rw['tau']} steps"
        if isinstance(rw, dict)
        else "no re-warmup (new entries on the base schedule)"
    )
    line = (
        f"grew at step {step} ({record.get('family', '?')}): {what} | params {params_before / 1e6:.3g}M -> "
        f"{params_after / 1e6:.3g}M | optimizer state {record.get('optimizer_state', '-')} | {rewarm}"
    )
    diag = [
        f"activation RMS ratio per layer (grown/original) {report['rms_ratio_per_layer']}"
        if "rms_ratio_per_layer" in report
        else None,
        f"validation-batch loss jump {report['loss_jump']:+.4f}" if "loss_jump" in report else None,
    ]
    diag = [d for d in diag if d]
    return line + ("\n  " + ", ".join(diag) if diag else "")
