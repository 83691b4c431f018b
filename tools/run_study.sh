#!/usr/bin/env bash
# Run (or continue) a ledger study from a frozen git worktree of this repository, so that work on the checkout
# cannot change the study's numbers while it runs; the ledger lands in this checkout's benchmarks/results/.
#
#   tools/run_study.sh sparkling-credible "tune tune-halving tune-cont eval bracket" [COMMIT]
#
# Each part resumes what the ledger does not hold; commit benchmarks/results/<study>/ as runs land. The study
# gets the cores: start it with `setsid nohup tools/run_study.sh ... &` and give its session priority over other
# work (as root: `echo -10 > /proc/<its pid>/autogroup`), run other heavy work at a lower priority.
set -euo pipefail
STUDY=${1:?study name, e.g. sparkling-credible}
PARTS=${2:?parts in order, e.g. "tune tune-halving tune-cont eval bracket"}
COMMIT=${3:-HEAD}
REPO=$(cd "$(dirname "$0")/.." && pwd)
TREE=${STUDY_TREE:-$REPO/../study-tree}
PY=${PYTHON:-$REPO/.venv/bin/python}
if [ ! -d "$TREE" ]; then git -C "$REPO" worktree add -q --detach "$TREE" "$COMMIT"; fi
git -C "$TREE" checkout -q --detach "$(git -C "$REPO" rev-parse "$COMMIT")"
echo "study $STUDY: worktree $TREE at $(git -C "$TREE" rev-parse --short HEAD), parts $PARTS"
export PYTHONPATH=$TREE/src OMP_NUM_THREADS=1
cd "$TREE"
for part in $PARTS; do
  "$PY" benchmarks/studies/regime_study.py --study "$STUDY" --results "$REPO/benchmarks/results" \
    --out "${STUDY_RUNS:-$REPO/../study-runs}" --workers "${WORKERS:-2}" --threads 1 --parts "$part"
done
