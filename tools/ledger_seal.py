"""Give a study ledger's records written before records carried digests (2026-12-07) the digest the ledger now
checks, once, so that a later edit is caught.

A record is sealed as it stands: run this only on a ledger whose files are as committed by the study runner (check
`git status` / `git diff` on it first); sealing an edited record would bless the edit. Records that already carry a
digest are left alone; a record that is not a well-formed record is reported and left alone.

    python tools/ledger_seal.py benchmarks/results/progressive-main
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nexus.experiments.ledger import DIGEST, RUNS, record_problem, seal
from nexus.experiments.runs import write_json_atomic


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ledger", help="a study's ledger folder (holding runs/)")
    a = ap.parse_args(argv)
    runs = Path(a.ledger) / RUNS
    if not runs.is_dir():
        print(
            f"error: ledger={a.ledger!r} holds no {RUNS}/ folder (valid: benchmarks/results/<study>)", file=sys.stderr
        )
        return 2
    sealed = bad = 0
    for p in sorted(runs.rglob("*.json")):
        rec = json.loads(p.read_text())
        if isinstance(rec, dict) and DIGEST in rec:
            continue
        problem = record_problem({**rec, DIGEST: ""}) if isinstance(rec, dict) else "not a record"
        if problem and "digest" not in problem:
            print(f"left alone: {p}: {problem}")
            bad += 1
            continue
        write_json_atomic(p, seal(rec))
        sealed += 1
    print(f"{sealed} record(s) sealed, {bad} left alone, in {runs}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
