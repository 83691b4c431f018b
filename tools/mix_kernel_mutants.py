"""Hand-made mutants of the ExoFormer mixing kernels, which mutmut cannot reach.

    python tools/mix_kernel_mutants.py             # every mutant below, one pytest process each

mutmut (tools/mutation.py) never mutates a decorated function: the numba kernels live inside
`mix_kernels._kernels` (a functools.cache'd factory), so the mixing's arithmetic gets no mutant from the
tool (FusedMix.backward's body now sits in the plain `fused_mix._backward`, which mutmut mutates; its
four mutants here stay as a cross-check). This script plants
one plausible one-line bug at a time in a scratch copy of src/ (a swapped factor, a dropped term, a
wrong index, the head-major layout ignored, a wrong derivative) and runs the fused-path tests of
tests/test_mixing_equations.py against it. Each mutant is a fresh process (numba compiles again), so
a pass takes minutes. Never part of .ci/run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNELS, FUSED = "nexus/models/mix_kernels.py", "nexus/models/fused_mix.py"
TESTS = ["tests/test_mixing_equations.py", "-k", "mix_layer_fused or in_place"]

# (file, what it breaks, exact source text, replacement): each text occurs once in its file
MUTANTS = [
    (
        KERNELS,
        "forward: factors swapped",
        "o[w] = (k2[w] * g2) * c[w] + (k1[w] * g1) * a[w]",
        "o[w] = (k2[w] * g1) * c[w] + (k1[w] * g2) * a[w]",
    ),
    (KERNELS, "forward without anchor: factor dropped", "o[w] = (k2[w] * g2) * c[w]\n", "o[w] = k2[w] * c[w]\n"),
    (KERNELS, "backward: anchor gradient with l2", "da[w] = g[w] * (k1[w] * g1)", "da[w] = g[w] * (k2[w] * g1)"),
    (
        KERNELS,
        "backward: current gradient without its factor",
        "dc[w] = g[w] * (k2[w] * g2)\n                            da",
        "dc[w] = g[w] * k2[w]\n                            da",
    ),
    (KERNELS, "backward: gamma1 gradient from the current side", "s1 += ga * k1[w]", "s1 += gc * k1[w]"),
    (
        KERNELS,
        "backward: gamma2 gradient with l1",
        "s2 += gc * k2[w]\n                            s1",
        "s2 += gc * k1[w]\n                            s1",
    ),
    (KERNELS, "backward: l1 gradient with gamma2", "e1[w] += ga * g1", "e1[w] += ga * g2"),
    (
        KERNELS,
        "backward: head-major layout ignored",
        "g = grad[b, h, t] if head_major else grad[b, t, h]",
        "g = grad[b, t, h]",
    ),
    (
        KERNELS,
        "backward without anchor: l2 gradient without gamma2",
        "e2[w] += gc * g2\n                if",
        "e2[w] += gc\n                if",
    ),
    (
        KERNELS,
        "gate backward: sigmoid derivative y instead of y(1 - y)",
        "dz[t, k] = d_gam[t, k] * (y * (1 - y))",
        "dz[t, k] = d_gam[t, k] * y",
    ),
    (KERNELS, "gate backward: first W2 row counted twice", "for k in range(1, K):", "for k in range(0, K):"),
    (KERNELS, "gate backward: bias gradient overwritten per token", "d_b[k] += dz[t, k]", "d_b[k] = dz[t, k]"),
    (
        KERNELS,
        "layer forward: a component's two columns swapped",
        "forward(curs[i], ancs[i], l1s[i], l2s[i], gam, cols[i, 0], cols[i, 1]",
        "forward(curs[i], ancs[i], l1s[i], l2s[i], gam, cols[i, 1], cols[i, 0]",
    ),
    (
        KERNELS,
        "layer backward: first component's layout for all",
        "backward(grads[i], head_major[i],",
        "backward(grads[i], head_major[0],",
    ),
    (
        FUSED,
        "FusedMix.backward: l1 and l2 gradients swapped",
        "d_l1 = [_flat_grad(dl[0], s)",
        "d_l1 = [_flat_grad(dl[1], s)",
    ),
    (FUSED, "FusedMix.backward: GELU derivative at its output", "gelu_backward(da, h2)", "gelu_backward(da, a2)"),
    (FUSED, "FusedMix.backward: input gradient skips the GELU", "d_x = (dh @ W1)", "d_x = (da @ W1)"),
    (
        FUSED,
        "FusedMix.backward: fixed-layout grads re-transposed wrongly",
        "grad = grad.transpose(1, 2).contiguous()",
        "grad = grad.contiguous()",
    ),
]


def run_one(work: Path, path: str, old: str, new: str) -> str:
    src = work / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(REPO / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    target = src / path
    text = target.read_text()
    if text.count(old) != 1:
        return f"not applied ({text.count(old)} matches)"
    target.write_text(text.replace(old, new))
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    return {0: "SURVIVED", 1: "killed"}.get(r.returncode, f"killed (exit {r.returncode})")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="mix-kernel-mutants-") as tmp:
        # the null control: the same copy with its first mutant's text left as it is must pass, or a "killed"
        # below could be a test that fails anyway
        path, _, text, _ = MUTANTS[0]
        null = run_one(Path(tmp), path, text, text)
        print(f"{'passes' if null == 'SURVIVED' else null:22s} null control: the scratch copy unchanged", flush=True)
        if null != "SURVIVED":
            print("the tests fail without a mutant, so no kill below would mean anything")
            return 1
        results = [(what, run_one(Path(tmp), path, old, new)) for path, what, old, new in MUTANTS]
        for what, result in results:
            print(f"{result:22s} {what}", flush=True)
    killed = sum(r.startswith("killed") for _, r in results)
    print(f"{killed} of {len(results)} hand-made mutants killed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
