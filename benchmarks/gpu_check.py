"""The whole GPU check in one command, for the few minutes a GPU machine is lent: the CUDA tests
(`pytest -m cuda tests/test_cuda.py`), then `gpu_mfu.py` (124M tied baseline, bf16, compiled, batch
16 x 1024, fused AdamW; MFU against the data-sheet dense bf16 peak and a same-process bf16 matmul),
then a short main job (`nexus experiment progressive --seed 0`) on the GPU. It writes one summary
(device, torch / CUDA / package versions, every figure, each stage's wall time) to OUT/summary.md
and OUT/summary.json, and prints it. Budget: under 8 minutes on an H100 (each stage has a timeout).

It runs from a clean checkout with no network and nothing installed but torch and the packages the
GPU image has: nexus is imported from the checkout (PYTHONPATH=src), never pip-installed.

    python3 benchmarks/gpu_check.py --out /tmp/gpu-check          # on the GPU machine
    python3 benchmarks/gpu_check.py --out /tmp/dry --dry-run      # the same stages scaled down on a CPU

--dry-run runs the CPU variants of the same tests, a tiny fp32 gpu_mfu run and a 20-step main job on
the CPU, with `datasets`, `wandb` and `lm_eval` made unimportable (the GPU image lacks them), to prove
the script runs end to end where no GPU is lent. Its figures mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))
from _result import parse  # noqa: E402  (benchmarks/ is not a package)

# Packages the GPU image lacks (/work/.library/device/KINDS.md, 2026-11-17): the dry run hides them.
ABSENT_ON_GPU_IMAGE = ("datasets", "wandb", "lm_eval")
REPORTED_PACKAGES = ("torch", "triton", "numpy", "transformers", "safetensors", "tokenizers", "numba", "tensorboard", "pytest")


def stage_plan(dry: bool, out: Path) -> list[dict]:
    """(name, command, timeout in s) of every stage. On the GPU the timeouts add up to < 8 minutes."""
    py = sys.executable
    if dry:
        tests = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow and not cuda", "-W",
                 "ignore::UserWarning", str(ROOT / "tests" / "test_cuda.py")]
        mfu = [py, str(BENCH / "gpu_mfu.py"), "--device", "cpu", "--dtype", "float32", "--no-compile", "--d-model", "64",
               "--layers", "2", "--vocab", "512", "--seq", "32", "--batch", "2", "--steps", "1", "--rounds", "2",
               "--peak-n", "128"]
        main = [py, "-m", "nexus", "experiment", "progressive", "--seed", "0", "--tokens", "40960", "--quiet",
                "--out", str(out / "main-job"), "--train.device", "cpu"]
        return [dict(name="cuda tests (CPU variants)", cmd=tests, timeout=600),
                dict(name="gpu_mfu (tiny, CPU)", cmd=mfu, timeout=300),
                dict(name="main job (20 steps, CPU)", cmd=main, timeout=900)]
    tests = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", "-rs", "-W", "ignore::UserWarning",
             str(ROOT / "tests" / "test_cuda.py")]
    mfu = [py, str(BENCH / "gpu_mfu.py")]  # its defaults are the configuration
    main = [py, "-m", "nexus", "experiment", "progressive", "--seed", "0", "--quiet", "--out", str(out / "main-job"),
            "--train.device", "cuda"]
    return [dict(name="cuda tests", cmd=tests, timeout=190), dict(name="gpu_mfu", cmd=mfu, timeout=150),
            dict(name="main job (seed 0, cuda)", cmd=main, timeout=120)]


def environment_report() -> dict:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
           "cuda_available": torch.cuda.is_available(), "host": platform.node(), "date_utc":
           time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(device=torch.cuda.get_device_name(0), capability=f"{p.major}.{p.minor}",
                   memory_gib=round(p.total_memory / 2**30, 1), sms=p.multi_processor_count,
                   cudnn=torch.backends.cudnn.version(), bf16_supported=torch.cuda.is_bf16_supported())
    else:
        env["device"] = f"cpu ({platform.processor() or platform.machine()})"
    env["packages"] = {}
    for name in REPORTED_PACKAGES:
        try:
            env["packages"][name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            env["packages"][name] = None
    try:
        env["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                    timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["git"] = None
    return env


def hide_packages(names, where: Path) -> str:
    """A sitecustomize.py in `where` that makes `names` unimportable (ModuleNotFoundError), so nexus is
    shown to run without them. Returns the directory to put first on PYTHONPATH."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        f"_HIDDEN = {tuple(names)!r}\n"
        "class _Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in _HIDDEN:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (hidden by gpu_check --dry-run)', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Hide())\n")
    return str(where)


def run_stage(stage: dict, env: dict, log: Path) -> dict:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(stage["cmd"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=stage["timeout"])
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    secs = time.perf_counter() - t0
    log.write_text(out)
    return {"name": stage["name"], "command": " ".join(stage["cmd"]), "rc": rc, "seconds": round(secs, 1),
            "log": log.name, "tail": out.strip().splitlines()[-15:]}


def pytest_counts(text: str) -> dict:
    """The counts of pytest's closing line ("3 passed, 2 skipped, 1 failed in 9.1s")."""
    tail = next((line for line in reversed(text.splitlines()) if re.search(r"\d+ (passed|failed|skipped|error)", line)), "")
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", tail)}


def main_job_figures(out: Path) -> dict:
    """The main job's headline numbers from its results.json, where it finished."""
    path = out / "main-job" / "results.json"
    if not path.is_file():
        return {}
    res = json.loads(path.read_text())
    summary = res.get("summary", {})
    figs = {"final_val_loss": {run: round(v["mean"], 4) for run, v in summary.get("final_val_loss", {}).items()}}
    diff = summary.get("grown_minus_scratch_final", {}).get("diff", {}).get("mean")
    figs["grown_minus_scratch"] = None if diff is None else round(diff, 4)
    figs["eq29_flops_saved_at_equal_tokens"] = res.get("eq29", {}).get("flops_saved")
    figs["seeds"] = res.get("seeds")
    return figs


def write_summary(out: Path, env: dict, stages: list[dict], dry: bool) -> str:
    lines = [f"# nexus GPU check{' (DRY RUN on a CPU: figures are plumbing only)' if dry else ''}", "",
             f"- date (UTC): {env['date_utc']}; host {env['host']}; git {env['git']}",
             f"- device: {env['device']}" + (f", capability {env.get('capability')}, {env.get('memory_gib')} GiB, "
                                              f"{env.get('sms')} SMs, bf16 {env.get('bf16_supported')}" if env["cuda_available"] else ""),
             f"- python {env['python']}, torch {env['torch']}, CUDA runtime {env['cuda_runtime']}, cuDNN {env.get('cudnn')}",
             "- packages: " + ", ".join(f"{k} {v}" for k, v in env["packages"].items()), ""]
    total = 0.0
    for st in stages:
        total += st["seconds"]
        lines.append(f"## {st['name']}: rc {st['rc']}, {st['seconds']} s")
        lines.append(f"`{st['command']}` (log: {st['log']})")
        for key in ("counts", "results", "figures"):
            if st.get(key):
                lines.append(f"- {key}: {json.dumps(st[key])}")
        if st["rc"] != 0:
            lines += ["```", *st["tail"], "```"]
        lines.append("")
    lines.append(f"total wall time of the stages: {total:.0f} s")
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    (out / "summary.json").write_text(json.dumps({"dry_run": dry, "environment": env, "stages": stages}, indent=1))
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for summary.md, summary.json and each stage's log")
    p.add_argument("--dry-run", action="store_true", help="the same stages scaled down on a CPU (plumbing check)")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    path = [str(ROOT / "src")]  # nexus from this checkout, never an installed copy
    if args.dry_run:
        path.insert(0, hide_packages(ABSENT_ON_GPU_IMAGE, Path(tempfile.mkdtemp(prefix="gpu-check-hide-"))))
        env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(path + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")  # no network there
    report = environment_report()
    if not args.dry_run and not report["cuda_available"]:
        print("gpu_check: torch sees no CUDA device (use --dry-run for the CPU plumbing check)", file=sys.stderr)
        return 2
    print(f"gpu_check: {report['device']} | torch {report['torch']} | CUDA {report['cuda_runtime']} | out {out}", flush=True)
    stages = []
    for i, stage in enumerate(stage_plan(args.dry_run, out)):
        print(f"gpu_check: [{i + 1}/3] {stage['name']} (timeout {stage['timeout']} s) ...", flush=True)
        res = run_stage(stage, env, out / f"stage{i + 1}.log")
        text = (out / res["log"]).read_text()
        if i == 0:
            res["counts"] = pytest_counts(text)
        elif i == 1:
            res["results"] = parse(text)
        else:
            res["figures"] = main_job_figures(out)
        print(f"gpu_check:   rc {res['rc']} in {res['seconds']} s", flush=True)
        stages.append(res)
    print(write_summary(out, report, stages, args.dry_run))
    return 0 if all(st["rc"] == 0 for st in stages) else 1


if __name__ == "__main__":
    sys.exit(main())
