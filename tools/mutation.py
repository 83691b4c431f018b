"""Mutation testing of the modules that define the papers' properties, one module at a time.

    python tools/mutation.py --list                      # the modules and the tests that cover each
    python tools/mutation.py nexus/growth/rewarmup.py    # one module (a few minutes on 2 cores)
    python tools/mutation.py --all --out mutation-report # every module in [tool.nexus-mutation]

The tool is mutmut (pinned in pyproject's `mutation` extra). pyproject.toml's `[tool.mutmut]` holds the
settings every run shares; `[tool.nexus-mutation.modules]` maps each module to the test files that
exercise it. Each module runs in its own scratch copy of src/ and tests/ whose `[tool.mutmut]` is
narrowed to that module and its tests: mutmut then records which of those tests reach each function
and runs every mutant against only those, so one module's run takes minutes, not the whole suite per
mutant. This script exists because mutmut has no per-module test map of its own; it never runs in
`.ci/run`.

Score = (killed + timeout) / (mutants - skipped). Every survivor's diff is written beside the table, so
each can be killed by a sharper test or listed in docs/testing.md as equivalent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent


def status(code) -> str:
    """mutmut's own reading of a mutant's exit code (killed, timeout, survived, no tests, ...)."""
    from mutmut.stats import status_by_exit_code

    return status_by_exit_code[code]


def load_plan() -> tuple[dict, dict[str, list[str]], dict[str, dict]]:
    """pyproject's shared mutmut settings, the module -> tests map, and per module the settings that override the
    shared ones (`[tool.nexus-mutation.settings]`: a module whose tests build an expensive fixture gets a larger
    timeout_constant, since mutmut's time estimate counts a test's call, not its fixtures' setup, so a mutant those
    tests do not kill would time out in the fixture and count as killed)."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    ours = data["tool"]["nexus-mutation"]
    return data["tool"]["mutmut"], ours["modules"], ours.get("settings", {})


def toml_list(items) -> str:
    return "[" + ", ".join(json.dumps(str(i)) for i in items) + "]"


def scratch_copy(work: Path, module: str, tests: list[str], shared: dict) -> None:
    """A copy of the tree whose [tool.mutmut] mutates `module` only and selects only `tests`."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(REPO / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    # the study tests import the scripts in benchmarks/ (tests/benchmark_module.py, beside tests/) and read the
    # committed ledgers in benchmarks/results/
    shutil.copytree(REPO / "benchmarks", work / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    with open(work / "tests" / "conftest.py", "a") as f:
        f.write(_FAST_FIRST)
    write_settings(work, module, tests, shared)
    # PYTHONPATH names mutants/src (see `mutmut` below); a folder missing when Python starts is cached as
    # "nothing here", so mutmut's stats pass would import nexus from the editable install (the main checkout)
    # instead, find no mutated function reached, stop, and only a retry would run the mutants
    (work / "mutants" / "src").mkdir(parents=True)
    (work / "mutants" / "src" / "sitecustomize.py").write_text(_CHILD_STATS)


def write_settings(work: Path, module: str, tests: list[str], shared: dict) -> None:
    """The scratch copy's pyproject.toml: this checkout's, its [tool.mutmut] narrowed to `module` and `tests`."""
    text = (REPO / "pyproject.toml").read_text()
    text = text[: text.index("[tool.mutmut]")]  # the shared table is rewritten below, narrowed
    lines = [
        f"source_paths = {toml_list(shared['source_paths'])}",
        f"only_mutate = {toml_list(['src/' + module])}",
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}",
        f"pytest_add_cli_args = {toml_list(shared.get('pytest_add_cli_args', []))}",
        f"do_not_mutate_patterns = {toml_list(shared.get('do_not_mutate_patterns', []))}",
        f"also_copy = {toml_list(['benchmarks/'])}",  # mutmut copies tests/ into mutants/ itself, not benchmarks/
    ]
    for key in ("timeout_multiplier", "timeout_constant"):
        if key in shared:
            lines.append(f"{key} = {shared[key]}")
    (work / "pyproject.toml").write_text(text + "[tool.mutmut]\n" + "\n".join(lines) + "\n")


# Appended to the scratch copy's tests/conftest.py: under a mutant, its tests run fastest first (mutmut's own
# timings from its stats pass). mutmut hands pytest a set of test ids, so their order is arbitrary, and with `-x` a
# mutant dies at its first failing test: a mutant a 0.1 s test kills would otherwise often wait for a 20 s test's
# fixture first. Only the order changes: a survivor still runs every test mapped to it.
_FAST_FIRST = """

_nexus_collection_hook = pytest_collection_modifyitems


def pytest_collection_modifyitems(config, items):  # noqa: F811 (wraps the one above)
    import json
    import os
    from pathlib import Path

    _nexus_collection_hook(config, items)
    stats = Path("mutmut-stats.json")
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", "") or not stats.is_file():
        return
    took = json.loads(stats.read_text()).get("duration_by_test", {})
    items.sort(key=lambda item: took.get(item.nodeid, 0.0))
"""


# Written beside the mutated nexus (PYTHONPATH): a process a test starts (a CLI, a study's runner and its workers)
# imports the mutated code and inherits MUTANT_UNDER_TEST. Under mutmut's stats pass that value makes each mutated
# function record that it was reached, which needs mutmut's config in the working directory (a child in a tmp
# folder has none: it dies at its first call) and is lost with the process anyway. Such a process runs the original
# code instead; under a mutant it runs that mutant, as the test's own process does.
_CHILD_STATS = """import os

if os.environ.get("MUTANT_UNDER_TEST") == "stats":
    del os.environ["MUTANT_UNDER_TEST"]
"""


def read_results(work: Path, module: str) -> dict[str, int | None]:
    meta = work / "mutants" / "src" / (module + ".meta")
    if not meta.exists():
        return {}
    return json.loads(meta.read_text())["exit_code_by_key"]


def mutmut(work: Path, *args: str, log=None) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONPATH=str(work / "mutants" / "src")
    )  # subprocess-launched CLIs import the mutant too
    return subprocess.run(
        [sys.executable, "-m", "mutmut", *args],
        cwd=work,
        env=env,
        text=True,
        stdout=log or subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


# One process for every diff: `mutmut show NAME` re-reads the whole tree per mutant (seconds each).
_DIFFS = """
import json, sys
from mutmut.__main__ import find_mutant, get_diff_for_mutant
out = {n: get_diff_for_mutant(n, path=find_mutant(n).path) for n in json.load(sys.stdin)}
print(json.dumps(out))
"""


def survivor_diffs(work: Path, names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    r = subprocess.run(
        [sys.executable, "-c", _DIFFS], cwd=work, input=json.dumps(names), text=True, capture_output=True
    )
    if r.returncode != 0:
        print(
            f"mutation: survivor diffs unavailable ({r.stderr.strip().splitlines()[-1:]}); names only", file=sys.stderr
        )
        return {}
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_module(module: str, tests: list[str], shared: dict, out: Path, children: int, resume: bool = False) -> dict:
    work = out / "work" / re.sub(r"[^A-Za-z0-9]+", "_", module)
    resuming = resume and (work / "mutants" / "mutmut-stats.json").is_file()
    if resuming:
        # the same copy of src/ and tests/ and mutmut's verdicts so far; only the settings are re-read (mutmut
        # re-runs the mutants a changed timeout could reclassify and keeps every other verdict)
        print(f"mutation: {module}: resuming in {work} (its copy of the tree is kept: edits since are not in it)")
        write_settings(work, module, tests, shared)
    else:
        if resume:
            print(f"mutation: {module}: nothing to resume in {work} (no finished stats pass); a fresh run")
        scratch_copy(work, module, tests, shared)
    t0 = time.time()
    with open(out / (work.name + ".log"), "a" if resuming else "w") as log:  # a resumed run keeps the earlier log
        for _ in range(3):  # mutmut resumes where it stopped; a run that leaves mutants unchecked is retried
            mutmut(work, "run", "--max-children", str(children), log=log)
            if None not in read_results(work, module).values():
                break
    codes = read_results(work, module)
    counts = Counter(status(c) for c in codes.values())
    scored = len(codes) - counts["skipped"]
    killed = counts["killed"] + counts["timeout"]
    survivors = sorted(k for k, c in codes.items() if status(c) in ("survived", "no tests", "suspicious"))
    diffs = survivor_diffs(work, survivors)
    with open(out / (work.name + ".survivors.txt"), "w") as f:
        for name in survivors:
            f.write(f"## {name} ({status(codes[name])})\n{diffs.get(name, '')}\n")
    return {
        "module": module,
        "mutants": len(codes),
        **counts,
        "score": killed / scored if scored else None,
        "seconds": round(time.time() - t0),
        "tests": tests,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("modules", nargs="*", help="module paths below src/, e.g. nexus/atomic.py")
    ap.add_argument("--all", action="store_true", help="every module in [tool.nexus-mutation.modules]")
    ap.add_argument("--list", action="store_true", help="print the modules and their tests, run nothing")
    ap.add_argument("--out", default="mutation-report", help="report folder (scratch copies go below it)")
    ap.add_argument("--children", type=int, default=2, help="mutants run in parallel (default 2 = this CPU)")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="continue a module's run in its scratch copy under --out (its verdicts kept; the settings re-read)",
    )
    args = ap.parse_args(argv)
    shared, plan, settings = load_plan()
    if args.list:
        for m, t in plan.items():
            print(f"{m}: {' '.join(t)}")
        return 0
    chosen = list(plan) if args.all else args.modules
    unknown = [m for m in chosen if m not in plan]
    if not chosen or unknown:
        print(
            f"mutation: module(s) {unknown or '(none)'} not in [tool.nexus-mutation.modules]; valid: {', '.join(plan)}",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    from importlib.metadata import version

    print(f"mutmut {version('mutmut')}, python {sys.version.split()[0]}, {len(chosen)} module(s)", flush=True)
    rows = []
    for m in chosen:
        row = run_module(m, plan[m], {**shared, **settings.get(m, {})}, out, args.children, args.resume)
        rows.append(row)
        score = "n/a" if row["score"] is None else f"{row['score']:.1%}"
        print(
            f"{m:45s} {row['mutants']:5d} mutants  killed {row.get('killed', 0) + row.get('timeout', 0):4d}  "
            f"survived {row.get('survived', 0):3d}  no tests {row.get('no tests', 0):3d}  score {score}  "
            f"({row['seconds']} s)",
            flush=True,
        )
        (out / "summary.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
