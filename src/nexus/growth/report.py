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
        lines.append(f"  verification: max |dlogits| = {ver.get('max_abs_dlogits', float('nan')):.3e}")
        dead = ver.get("dead_blocks") or []
        grads = ver.get("new_block_grad_norms") or {}
        if grads:
            live = len(grads) - len(dead)
            lines.append(f"  new blocks with non-zero gradient within two probe steps: {live}/{len(grads)}")
        if dead:
            lines.append(f"  WARNING dead blocks (zero gradient, will never train): {', '.join(dead[:8])}"
                         + (" ..." if len(dead) > 8 else ""))
    return "\n".join(lines)
