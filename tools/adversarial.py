"""An adversarial harness for nexus's output safety (issue 42): forged manifests and lock journals, adopted
names, appended / edited / truncated files of every kind nexus writes, a kill at every crash point the
source declares, disk full (a small tmpfs), read-only and immutable places, concurrent writers, odd names.

Every case runs the real CLI in subprocesses inside its own temporary workspace and is classified:

    valid    legitimate input, nexus did the job (exit 0), nothing lost
    clean    nexus refused with one line (exit 2) or recovered, nothing lost
    unclean  a traceback, a hang, an unexpected exit code, an error of more than one line, leftover
             temporaries, or bad input silently accepted
    loss     a byte nexus did not record was changed or deleted (every file the case created, or changed
             after nexus wrote it, is hashed before and after), or a killed run that the same command
             cannot continue

Not part of the test suite (a full pass runs ~10 min on one core). Usage:

    OMP_NUM_THREADS=1 nice -n 5 python tools/adversarial.py [--only PATTERN] [--json FILE] [--keep DIR] [--list]

The kills are enumerated from the source: every `crash_point("NAME"...)` call in src/nexus is found by
parsing it, the scenarios are run once with NEXUS_CRASH_TRACE to learn which scenario reaches which point
(and for which output, `NAME@WHAT`), and one case kills each scenario at the first time it reaches each.
A point no scenario reaches is reported as a failure of the harness itself.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import fnmatch
import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
TINY = [
    "--preset",
    "baseline-micro",
    "--model.d_model",
    "32",
    "--data.seq_len",
    "32",
    "--train.batch_size",
    "4",
    "--train.eval_every",
    "0",
    "--train.sample_tokens",
    "4",
    "--train.log_every",
    "1",
    "--quiet",
]
TRAIN = ["train", *TINY, "--train.steps", "2", "--train.save_every", "1", "--train.keep_last", "1"]
TIMEOUT = int(os.environ.get("ADVERSARIAL_TIMEOUT", 90))  # seconds one command may take before it counts as a hang
TEMPLATE_TIMEOUT = 900  # building a template is not under test (the study template trains 12 smoke runs)
BOOKKEEPING = (".nexus-run",)  # nexus's own record: a forged one may be rewritten, it holds no user bytes


# ---------------------------------------------------------------- running the CLI


@dataclass
class Result:
    argv: list
    rc: int
    out: str
    err: str
    seconds: float


SHARED_CACHE: list[Path] = []  # the tokenized corpus cache every case reads (built once, by the templates)


def nexus_env(ws: Path, extra: dict | None = None) -> dict:
    cache = SHARED_CACHE[0] if SHARED_CACHE else ws / ".cache"
    env = dict(
        os.environ,
        PYTHONPATH=str(SRC),
        OMP_NUM_THREADS="1",
        NEXUS_CACHE=str(cache),
        HF_HUB_OFFLINE="1",
        WANDB_MODE="offline",
        ADVERSARIAL_CASE=str(ws),
        PYTHONUNBUFFERED="1",
    )
    for k in ("NEXUS_CRASH_AT", "NEXUS_CRASH_TRACE"):
        env.pop(k, None)
    env.update(extra or {})
    return env


def start(ws: Path, argv, env=None) -> subprocess.Popen:
    argv = [os.fsdecode(a) for a in argv]
    # a script (the study runner) runs as itself; anything else is a `nexus` command
    cmd = [sys.executable, *argv] if argv and argv[0].endswith(".py") else [sys.executable, "-m", "nexus", *argv]
    return subprocess.Popen(
        cmd, cwd=ws, env=nexus_env(ws, env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )


def finish(p: subprocess.Popen, argv, t0: float, timeout: float = TIMEOUT) -> Result:
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = "hang"
    return Result(
        [os.fsdecode(a) for a in argv],
        rc,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
        time.monotonic() - t0,
    )


def cli(ws: Path, argv, env=None, timeout: float = TIMEOUT) -> Result:
    t0 = time.monotonic()
    return finish(start(ws, argv, env), argv, t0, timeout)


# ---------------------------------------------------------------- user bytes


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry below `root`: files by sha256, symlinks by target, directories by kind."""
    snap = {}
    for dirpath, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix() if isinstance(name, str) else str(p)
            try:
                st = p.lstat()
                if stat.S_ISLNK(st.st_mode):
                    snap[rel] = ("link", os.readlink(p))
                elif stat.S_ISDIR(st.st_mode):
                    snap[rel] = ("dir",)
                elif stat.S_ISREG(st.st_mode):
                    h = hashlib.sha256()
                    with open(p, "rb") as f:
                        for block in iter(lambda: f.read(1 << 20), b""):
                            h.update(block)
                    snap[rel] = ("file", h.hexdigest())
                else:
                    snap[rel] = ("special", stat.S_IFMT(st.st_mode))
            except OSError as e:
                snap[rel] = ("unreadable", e.errno)
    return snap


def user_entries(before_case: dict, after_setup: dict) -> dict:
    """What the case made the user's: entries it created or changed (nexus's own record excluded)."""
    return {
        rel: v
        for rel, v in after_setup.items()
        if before_case.get(rel) != v and Path(rel).name not in BOOKKEEPING and not rel.startswith(".cache")
    }


def nexus_lock(p: Path) -> bool:
    """A lock file in nexus's own format (its first line a holder): bookkeeping a dead writer left, which a
    later writer takes over by design. Anything else under a lock name stays the user's."""
    if not p.name.endswith(".nexus-lock") or p.is_symlink() or not p.is_file():
        return False
    try:
        first = json.loads(p.read_bytes().split(b"\n", 1)[0])
    except ValueError:
        return False
    return isinstance(first, dict) and isinstance(first.get("pid"), int) and isinstance(first.get("host"), str)


# ---------------------------------------------------------------- cases


@dataclass
class Step:
    argv: list
    expect: str = "any"  # ok | refuse | any (0 or 2) | killed (137) | stopped (SIGTERM: 143 and one line)
    env: dict | None = None
    parallel: int = 1  # run this many copies at once
    alongside: list | None = None  # another command started at the same moment


@dataclass
class Case:
    name: str
    group: str
    templates: tuple = ()  # copied into the workspace before setup
    setup: object = None  # callable(ws) -> None
    steps: list = field(default_factory=list)
    then: object = None  # callable(ws) -> Step: must succeed afterwards (the run continues)
    check: object = None  # callable(ws, results) -> str | None: a further failure, "loss:" or "unclean:" prefixed
    teardown: object = None  # callable(ws) (unmount, chattr -i)
    needs: object = None  # callable() -> str | None: why the case cannot run here (reported as skipped)


CASES: list[Case] = []


def case(name, group, templates=(), steps=(), setup=None, then=None, check=None, teardown=None, needs=None):
    CASES.append(Case(name, group, tuple(templates), setup, list(steps), then, check, teardown, needs))


def write(p: Path, data) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    (p.write_bytes if isinstance(data, bytes) else p.write_text)(data)


def forge_manifest(run: Path, mutate) -> None:
    m = json.loads((run / ".nexus-run").read_text())
    mutate(m)
    (run / ".nexus-run").write_text(json.dumps(m))


def victim(ws: Path, name="victim") -> Path:
    """A user's folder beside the run, with a file in it: what a forged entry would aim a delete at."""
    write(ws / name / "thesis.txt", f"the user's own words in {name}\n")
    return ws / name


def holder(pid: int, host: str | None = None, start_time=None, cmd="nexus train") -> str:
    """A lock's first line as nexus writes it (nexus.outdir.lock._holder)."""
    h = {"pid": pid, "host": host or socket.gethostname(), "started": "2026-01-01T00:00:00", "command": cmd}
    if start_time is not None:
        h["proc_start"] = start_time
    return json.dumps(h)


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


OVERWRITE = [*TRAIN, "--out", "run", "--overwrite"]
RESUME = [*TRAIN, "--train.steps", "4", "--out", "run", "--resume", "auto"]
RESUME_SAME = [*TRAIN, "--out", "run", "--resume", "auto"]


def continue_run(steps="4"):
    return lambda ws: Step([*TRAIN, "--train.steps", steps, "--out", "run", "--resume", "auto"], "ok")


def metrics_steps(run: Path) -> list[int]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step"] for r in rows if "loss" in r]


def steps_once(n: int, rel="run"):
    def check(ws, results):
        try:
            got = metrics_steps(ws / rel)
        except (OSError, ValueError, KeyError) as e:
            return f"loss: metrics of {rel} unreadable after continuing ({e})"
        if got != list(range(1, n + 1)):
            return f"loss: {rel} trained steps {got}, not 1..{n} once each"
        return None

    return check


# --- A. forged manifests: entries of every field type, paths outside the output, odd manifests


def _forge_cases():
    def entry_case(name, entry_name, entry, cmd=OVERWRITE, victims=("victim",)):
        def setup(ws):
            for v in victims:
                victim(ws, v)
            forge_manifest(
                ws / "run",
                lambda m: m["files"].__setitem__(
                    entry_name(ws) if callable(entry_name) else entry_name, entry(ws) if callable(entry) else entry
                ),
            )

        case(name, "forged manifest", ["run"], [Step(cmd)], setup)

    def vhash(ws):
        p = ws / "victim" / "thesis.txt"
        return {"size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}

    entry_case("forge-absolute-file-with-its-true-hash", lambda ws: str(ws / "victim" / "thesis.txt"), vhash)
    entry_case("forge-dotdot-nested-dir", "checkpoint/../../victim", {"dir": True})
    entry_case("forge-dotdot-library-on-resume", "../victim", {"dir": "library"}, RESUME)
    entry_case("forge-dot-part", "./config.yaml", {"size": 1, "sha256": "0" * 64})
    entry_case("forge-empty-part", "checkpoint//model.safetensors", {"size": 1, "sha256": "0" * 64})
    entry_case("forge-nul-in-name", "config.yaml\u0000../../victim", {"dir": True})
    entry_case("forge-backslash-dotdot", "..\\victim", {"dir": True})
    entry_case("forge-unicode-dotdot", "\u2024\u2024/victim", {"dir": True})  # one-dot leaders, not '..'
    entry_case("forge-newline-name", "a\n../victim", {"dir": True})
    for field_name, bad in [
        ("size", "1879"),
        ("size", -1),
        ("size", 1.5),
        ("size", True),
        ("size", None),
        ("size", 10**30),
        ("sha256", 5),
        ("sha256", None),
        ("sha256", ["x"]),
        ("grows", "yes"),
        ("appending", 7),
        ("appending", {"a": 1}),
    ]:

        def mutate(m, field_name=field_name, bad=bad):
            m["files"]["config.yaml"][field_name] = bad

        label = (
            type(bad).__name__
            if not isinstance(bad, int) or isinstance(bad, bool)
            else ("neg" if bad < 0 else "huge" if bad > 2**63 else "int")
        )
        case(
            f"forge-config-yaml-{field_name}-{label}",
            "forged manifest",
            ["run"],
            [Step(OVERWRITE)],
            lambda ws, mutate=mutate: forge_manifest(ws / "run", mutate),
        )
    for dir_value in (1, "other", False, {}, [], "LIBRARY"):
        shown = json.dumps(dir_value).replace('"', "") or "empty"
        case(
            f"forge-dir-field-{shown}-{type(dir_value).__name__}",
            "forged manifest",
            ["run"],
            [Step(OVERWRITE)],
            lambda ws, v=dir_value: (
                victim(ws),
                write(ws / "run" / "mine" / "notes.txt", "mine\n"),
                forge_manifest(ws / "run", lambda m: m["files"].__setitem__("mine", {"dir": v})),
            ),
        )
    case(
        "forge-entry-is-a-string",
        "forged manifest",
        ["run"],
        [Step(OVERWRITE)],
        lambda ws: forge_manifest(ws / "run", lambda m: m["files"].__setitem__("config.yaml", "sha")),
    )
    case(
        "forge-files-is-a-list",
        "forged manifest",
        ["run"],
        [Step(OVERWRITE), Step(RESUME)],
        lambda ws: forge_manifest(ws / "run", lambda m: m.__setitem__("files", list(m["files"]))),
    )
    case(
        "forge-kind-is-another-kind",
        "forged manifest",
        ["run"],
        [Step(OVERWRITE), Step(RESUME)],
        lambda ws: forge_manifest(ws / "run", lambda m: m.__setitem__("kind", "prepared corpus")),
    )
    case(
        "forge-kind-is-a-number",
        "forged manifest",
        ["run"],
        [Step(OVERWRITE)],
        lambda ws: forge_manifest(ws / "run", lambda m: m.__setitem__("kind", 5)),
    )
    case(
        "forge-manifest-deeply-nested-json",
        "forged manifest",
        ["run"],
        [Step(OVERWRITE), Step(RESUME)],
        lambda ws: write(
            ws / "run" / ".nexus-run", '{"kind": "train run", "files": ' + "[" * 200000 + "]" * 200000 + "}"
        ),
    )
    case(
        "forge-manifest-binary",
        "forged manifest",
        ["run"],
        [Step(OVERWRITE)],
        lambda ws: write(ws / "run" / ".nexus-run", bytes(range(256)) * 4),
    )
    case(
        "forge-manifest-is-a-directory",
        "forged manifest",
        ["run"],
        [Step(OVERWRITE)],
        lambda ws: ((ws / "run" / ".nexus-run").unlink(), write(ws / "run" / ".nexus-run" / "x.txt", "user's\n")),
    )
    case(
        "forge-manifest-is-a-fifo",
        "forged manifest",
        ["run"],
        [Step(OVERWRITE), Step(RESUME)],
        lambda ws: ((ws / "run" / ".nexus-run").unlink(), os.mkfifo(ws / "run" / ".nexus-run")),
    )
    case(
        "forge-manifest-symlink-to-another-run",
        "forged manifest",
        ["run"],
        [Step(OVERWRITE)],
        lambda ws: (
            shutil.copytree(ws / "run", ws / "other"),
            (ws / "run" / ".nexus-run").unlink(),
            (ws / "run" / ".nexus-run").symlink_to(ws / "other" / ".nexus-run"),
        ),
    )
    case(
        "forge-manifest-hardlink-from-another-run",
        "forged manifest",
        ["run"],
        [Step([*TRAIN, "--out", "other", "--overwrite"])],
        lambda ws: (victim(ws, "other"), os.link(ws / "run" / ".nexus-run", ws / "other" / ".nexus-run")),
    )

    def chain(ws):
        victim(ws)
        (ws / "hop2").symlink_to(ws / "victim")
        (ws / "hop1").symlink_to(ws / "hop2")
        (ws / "run" / "logs").symlink_to(ws / "hop1")
        forge_manifest(
            ws / "run",
            lambda m: m["files"].update(
                {"logs": {"dir": "library"}, "logs/thesis.txt": {"size": 1, "sha256": "0" * 64}}
            ),
        )

    case("forge-entry-through-a-symlink-chain", "forged manifest", ["run"], [Step(OVERWRITE), Step(RESUME)], chain)

    def unicode_entry(ws):
        write(ws / "run" / "ノート" / "考察.txt", "user's notes\n")
        forge_manifest(ws / "run", lambda m: m["files"].__setitem__("ノート/考察.txt", {"size": 3, "sha256": "1" * 64}))

    case("forge-unicode-entry-wrong-hash", "forged manifest", ["run"], [Step(OVERWRITE)], unicode_entry)

    def step_entry_on_user_dir(ws):
        write(ws / "run" / "step_0000009" / "meta.json", "{}\n")
        write(ws / "run" / "step_0000009" / "trainer_state.pt", "user's\n")
        forge_manifest(ws / "run", lambda m: m["files"].__setitem__("step_0000009", {"dir": True}))

    case(
        "forge-step-entry-on-a-users-folder",
        "forged manifest",
        ["run"],
        [Step(RESUME), Step(OVERWRITE)],
        step_entry_on_user_dir,
    )

    def prep_forge(ws):
        victim(ws)
        forge_manifest(
            ws / "prep", lambda m: m["files"].__setitem__("../victim/thesis.txt", {"size": 1, "sha256": "0" * 64})
        )

    case(
        "forge-prepared-corpus-entry-outside",
        "forged manifest",
        ["prep"],
        [Step(["data", "prepare", "embedded", "--tokenizer", "byte", "--out", "prep", "--num-proc", "1", "--quiet"])],
        prep_forge,
    )

    def export_forge(ws):
        victim(ws)
        forge_manifest(
            ws / "hf",
            lambda m: m["files"].__setitem__(
                "/" + str(ws / "victim" / "thesis.txt").lstrip("/"), {"size": 1, "sha256": "0" * 64}
            ),
        )

    case(
        "forge-hf-export-entry-absolute",
        "forged manifest",
        ["run", "hf"],
        [Step(["export", "--checkpoint", "run/checkpoint", "--format", "hf", "--out", "hf", "--overwrite"])],
        export_forge,
    )


# --- B. forged lock journals: every line kind, every holder form, odd lock files


def _lock_cases():
    def journal(name, lines, cmd=OVERWRITE, extra=None, then=None, lockname=".run.nexus-lock"):
        def setup(ws):
            victim(ws)
            if extra:
                extra(ws)
            body = lines(ws) if callable(lines) else lines
            write(ws / lockname, body if isinstance(body, bytes) else "".join(x + "\n" for x in body))

        case(name, "forged journal", ["run"], [Step(cmd)], setup, then=then)

    dead = lambda ws: holder(dead_pid())  # noqa: E731
    journal("journal-pending-absolute", lambda ws: [dead(ws), json.dumps({"pending": str(ws / "victim")})], RESUME)
    journal(
        "journal-pending-sibling-temporary",
        lambda ws: [dead(ws), json.dumps({"pending": "victim/.thesis.txt.del-1-1"})],
        RESUME,
        extra=lambda ws: write(ws / "victim" / ".thesis.txt.del-1-1", "user's\n"),
    )
    journal(
        "journal-pending-users-plain-folder-inside",
        lambda ws: [dead(ws), json.dumps({"pending": "run/photos"})],
        OVERWRITE,
        extra=lambda ws: write(ws / "run" / "photos" / "cat.jpg", b"\xff\xd8user"),
    )
    journal(
        "journal-ready-forged-hash-for-users-file",
        lambda ws: [
            dead(ws),
            json.dumps({"ready": "run/notes.md", "sha256": "enter:" + hashlib.sha256(b"user notes\n").hexdigest()}),
        ],
        RESUME,
        extra=lambda ws: write(ws / "run" / "notes.md", "user notes\n"),
    )
    journal(
        "journal-ready-for-a-temporary-that-is-gone",
        lambda ws: [
            dead(ws),
            json.dumps({"pending": "run/.config.yaml.tmp-1-2"}),
            json.dumps({"ready": "run/.config.yaml.tmp-1-2", "sha256": "enter:" + "0" * 64}),
        ],
        RESUME,
        then=continue_run("6"),
    )
    journal(
        "journal-done-without-pending",
        lambda ws: [dead(ws), json.dumps({"done": "run/metrics.jsonl"})],
        RESUME,
        then=continue_run("6"),
    )
    journal(
        "journal-garbage-lines",
        lambda ws: [
            dead(ws),
            "{not json",
            json.dumps([1, 2]),
            json.dumps({"pending": 5}),
            json.dumps({"ready": None}),
            "\x00\x01",
        ],
        RESUME,
        then=continue_run("6"),
    )
    journal("journal-holder-not-json", ["pid 1 host x"], RESUME)
    journal("journal-empty-file", [], RESUME)
    journal("journal-binary", bytes(range(256)), RESUME)
    journal("journal-holder-on-another-host", lambda ws: [holder(1, host="elsewhere.example")], RESUME)
    journal("journal-holder-pid-reused", lambda ws: [holder(1, start_time="123")], RESUME, then=continue_run("6"))
    journal("journal-holder-live-self-like", lambda ws: [holder(os.getpid(), start_time="x")], RESUME)
    journal(
        "journal-pending-huge-line",
        lambda ws: [dead(ws), json.dumps({"pending": "run/." + "a" * 100000 + ".tmp-1-1"})],
        RESUME,
    )
    journal(
        "journal-pending-through-symlink",
        lambda ws: [dead(ws), json.dumps({"pending": "run/lnk/.thesis.txt.tmp-1-1"})],
        RESUME,
        extra=lambda ws: (
            write(ws / "victim" / ".thesis.txt.tmp-1-1", "user's\n"),
            (ws / "run" / "lnk").symlink_to(ws / "victim"),
        ),
    )
    case(
        "lock-name-is-a-users-directory",
        "forged journal",
        ["run"],
        [Step(RESUME), Step(OVERWRITE)],
        lambda ws: write(ws / ".run.nexus-lock" / "keep.txt", "user's\n"),
    )
    case(
        "lock-name-is-a-symlink-to-users-file",
        "forged journal",
        ["run"],
        [Step(RESUME)],
        lambda ws: (victim(ws), (ws / ".run.nexus-lock").symlink_to(ws / "victim" / "thesis.txt")),
    )
    case("lock-name-is-a-fifo", "forged journal", ["run"], [Step(RESUME)], lambda ws: os.mkfifo(ws / ".run.nexus-lock"))
    case(
        "lock-temporary-look-alike-of-a-live-pid",
        "forged journal",
        ["run"],
        [Step(RESUME)],
        lambda ws: write(ws / f".run.nexus-lock.tmp-{os.getpid()}", holder(os.getpid()) + "\n"),
        then=continue_run("6"),
    )
    case(
        "lock-of-prepared-corpus-pending-outside",
        "forged journal",
        ["prep"],
        [Step(["data", "prepare", "embedded", "--tokenizer", "byte", "--out", "prep", "--num-proc", "1", "--quiet"])],
        lambda ws: (
            victim(ws),
            write(
                ws / ".prep.nexus-lock",
                holder(dead_pid()) + "\n" + json.dumps({"pending": "victim/.thesis.txt.del-9-9"}) + "\n",
            ),
            write(ws / "victim" / ".thesis.txt.del-9-9", "user's\n"),
        ),
    )


# --- C. adopted names: things of the user's under names nexus uses


def _adopt_cases():
    case(
        "adopt-users-tensorboard-file-then-overwrite",
        "adopted name",
        ["run_tb"],
        [Step([*TRAIN, "--train.log_to", "jsonl,tensorboard", "--out", "run", "--overwrite"])],
        lambda ws: write(
            ws / "run" / "tensorboard" / "my_notes.txt", "the user's notes in nexus's tensorboard folder\n"
        ),
    )
    case(
        "adopt-users-wandb-symlink",
        "adopted name",
        ["run"],
        [Step([*TRAIN, "--train.steps", "4", "--train.log_to", "jsonl,wandb", "--out", "run", "--resume", "auto"])],
        lambda ws: (victim(ws), (ws / "run" / "wandb").symlink_to(ws / "victim")),
    )
    case(
        "adopt-users-file-named-like-a-step",
        "adopted name",
        ["run"],
        [Step(RESUME)],
        lambda ws: write(ws / "run" / "step_0000003", "a user's file with a step name\n"),
    )
    case(
        "adopt-users-folder-named-like-a-step",
        "adopted name",
        ["run"],
        [Step(RESUME)],
        lambda ws: write(ws / "run" / "step_0000004" / "meta.json", '{"mine": true}\n'),
    )
    case(
        "adopt-users-done-json",
        "adopted name",
        ["run"],
        [Step(RESUME)],
        lambda ws: write(ws / "run" / "done.json", '{"the user": "wrote this"}\n'),
    )
    case(
        "adopt-manifest-temporary-look-alike",
        "adopted name",
        ["run"],
        [Step(OVERWRITE)],
        lambda ws: write(ws / "run" / ".nexus-run.tmp-99999999", "user's file with a nexus-like name\n"),
    )
    case(
        "adopt-users-temporary-look-alike-no-journal",
        "adopted name",
        ["run"],
        [Step(RESUME), Step(OVERWRITE)],
        lambda ws: write(ws / "run" / ".config.yaml.tmp-1-1", "user's\n"),
    )
    case(
        "adopt-users-file-beside-checkpoint-prefix",
        "adopted name",
        ["run"],
        [Step(OVERWRITE)],
        lambda ws: write(ws / "run" / "checkpoint_notes.txt", "user's notes\n"),
    )
    case(
        "adopt-users-file-inside-checkpoint",
        "adopted name",
        ["run"],
        [Step(RESUME), Step(OVERWRITE)],
        lambda ws: write(ws / "run" / "checkpoint" / "README.md", "user's readme\n"),
    )
    case(
        "adopt-users-file-inside-step-checkpoint-pruned",
        "adopted name",
        ["run"],
        [Step(RESUME)],
        lambda ws: write(ws / "run" / "step_0000001" / "notes.txt", "user's notes in a step that would be pruned\n"),
    )
    case(
        "adopt-hardlink-of-users-file-into-run",
        "adopted name",
        ["run"],
        [Step(OVERWRITE)],
        lambda ws: (victim(ws), os.link(ws / "victim" / "thesis.txt", ws / "run" / "thesis.txt")),
    )
    case(
        "adopt-users-probe-look-alike-in-empty-out",
        "adopted name",
        [],
        [Step([*TRAIN, "--out", "fresh"])],
        lambda ws: write(ws / "fresh" / ".nexus-probe-abc" / "x", "user's\n"),
    )
    case(
        "adopt-users-file-in-experiment-run-folder",
        "adopted name",
        ["exp"],
        [Step(EXPERIMENT)],
        lambda ws: write(ws / "exp" / "baseline-micro" / "seed0" / "analysis.ipynb", "{}\n"),
    )


EXPERIMENT = [
    "experiment",
    "compare",
    "--presets",
    "baseline-micro",
    "--seeds",
    "0",
    "--tokens",
    "256",
    "--out",
    "exp",
    *TINY,
]


# --- D. appended, edited and truncated files of every kind nexus writes


def _edit(p: Path, how: str) -> None:
    data = p.read_bytes()
    if how == "append":
        p.write_bytes(
            data + (b'{"note": "the user\'s own line"}\n' if p.suffix == ".jsonl" else b"the user's addition\n")
        )
    elif how == "edit":  # same size: only a hash check can tell
        i = len(data) // 2
        p.write_bytes(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :])
    elif how == "truncate":
        p.write_bytes(data[: len(data) // 2])


def _edited_cases():
    for rel, hows, cmds in [
        ("metrics.jsonl", ("append", "edit", "truncate"), (OVERWRITE, RESUME)),
        ("loss_curve.csv", ("append", "edit"), (RESUME, OVERWRITE)),
        ("config.yaml", ("edit", "truncate"), (OVERWRITE, RESUME)),
        ("loss_curve.png", ("truncate",), (RESUME,)),
        ("checkpoint/model.safetensors", ("edit",), (RESUME, OVERWRITE)),
        ("checkpoint/meta.json", ("append",), (RESUME,)),
        ("step_0000001/trainer_state.pt", ("truncate",), (RESUME,)),
    ]:
        for how in hows:
            case(
                f"{how}-{rel.replace('/', '-')}",
                "edited file",
                ["run"],
                [Step(c) for c in cmds],
                lambda ws, rel=rel, how=how: _edit(ws / "run" / rel, how),
            )
    prep = ["data", "prepare", "embedded", "--tokenizer", "byte", "--out", "prep", "--num-proc", "1", "--quiet"]
    train_on = [*TRAIN, "--data", "prep", "--out", "r2"]
    # a changed shard or manifest must be refused; the stored tokenizer file is read only when named as a
    # tokenizer, and then checked against the identity manifest.json records, so training on the corpus is right
    for rel, how, want in [
        ("train-00000.bin", "edit", "refuse"),
        ("train-00000.bin", "truncate", "refuse"),
        ("manifest.json", "append", "refuse"),
        ("tokenizer.txt", "edit", "any"),
    ]:
        case(
            f"{how}-prepared-{rel}",
            "edited file",
            ["prep"],
            [Step(train_on, want), Step(prep, want)],
            lambda ws, rel=rel, how=how: _edit(ws / "prep" / rel, how),
        )
    case(
        "edit-hf-export-config-json",
        "edited file",
        ["run", "hf"],
        [Step(["export", "--checkpoint", "run/checkpoint", "--format", "hf", "--out", "hf", "--overwrite"])],
        lambda ws: _edit(ws / "hf" / "config.json", "append"),
    )
    case(
        "edit-experiment-report-md",
        "edited file",
        ["exp"],
        [Step(EXPERIMENT)],
        lambda ws: _edit(ws / "exp" / "report.md", "append"),
    )
    case(
        "edit-experiment-seed-metrics",
        "edited file",
        ["exp"],
        [Step(EXPERIMENT)],
        lambda ws: _edit(ws / "exp" / "baseline-micro" / "seed0" / "metrics.jsonl", "append"),
    )


# --- E. kills at every crash point (generated from the source, see discover_kills)

SCENARIOS = {  # name: (templates, the killed command, the command that must continue it, steps expected after)
    "train": ((), [*TRAIN, "--out", "run"], [*TRAIN, "--out", "run", "--resume", "auto"], 2),
    "overwrite": (("run",), OVERWRITE, OVERWRITE, 2),
    "resume": (
        ("run",),
        [*TRAIN, "--train.steps", "4", "--out", "run", "--resume", "auto"],
        [*TRAIN, "--train.steps", "4", "--out", "run", "--resume", "auto"],
        4,
    ),
    "prepare": (
        (),
        ["data", "prepare", "embedded", "--tokenizer", "byte", "--out", "prep", "--num-proc", "1", "--quiet"],
        ["data", "prepare", "embedded", "--tokenizer", "byte", "--out", "prep", "--num-proc", "1", "--quiet"],
        None,
    ),
    "export": (
        ("run",),
        ["export", "--checkpoint", "run/checkpoint", "--format", "hf", "--out", "hf"],
        ["export", "--checkpoint", "run/checkpoint", "--format", "hf", "--out", "hf", "--overwrite"],
        None,
    ),
    "experiment": ((), EXPERIMENT, EXPERIMENT, None),
}


def declared_crash_points() -> set[str]:
    """Every crash_point("NAME", ...) call in src/nexus, found by parsing the source."""
    names = set()
    for f in (SRC / "nexus").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "crash_point"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.add(node.args[0].value)
    return names


def discover_kills(templates: dict, work: Path) -> tuple[list, set]:
    """Run each scenario once with NEXUS_CRASH_TRACE; a kill case per (scenario, point[@what]) first reached."""
    reached: dict[str, list[str]] = {}
    for sc, (tmpl, argv, _, _) in SCENARIOS.items():
        ws = Path(tempfile.mkdtemp(prefix=f"trace-{sc}-", dir=work))
        for t in tmpl:
            shutil.copytree(templates[t], ws / t, symlinks=True)
        r = cli(ws, argv, {"NEXUS_CRASH_TRACE": str(ws / ".trace")})
        if r.rc != 0:
            print(f"warning: scenario {sc} failed unkilled (rc {r.rc}): {r.err.strip()[-300:]}", file=sys.stderr)
        hits = (ws / ".trace").read_text().split() if (ws / ".trace").exists() else []
        reached[sc] = list(dict.fromkeys(hits))
        shutil.rmtree(ws, ignore_errors=True)
    kills = []
    for sc, points in reached.items():
        for point in points:
            kills.append((sc, point))
    seen = {p.split("@")[0] for ps in reached.values() for p in ps}
    return kills, declared_crash_points() - seen


def kill_case(sc: str, point: str) -> Case:
    tmpl, argv, again, n = SCENARIOS[sc]
    out = {"prepare": "prep", "export": "hf", "experiment": "exp"}.get(sc, "run")

    def check(ws, results):
        left = sorted(
            p.name
            for d in (ws, ws / out)
            if d.is_dir()
            for p in d.iterdir()
            if p.name.startswith(".") and p.name not in (".nexus-run", ".cache", ".trace")
        )
        if left:
            return f"unclean: temporaries left after continuing: {left[:4]}"
        return steps_once(n, out)(ws, results) if n else None

    return Case(
        f"kill-{sc}-at-{point}",
        "kill",
        tmpl,
        None,
        [Step(argv, "killed", {"NEXUS_CRASH_AT": point})],
        lambda ws: Step(again, "ok"),
        check,
    )


# --- F. disk full, read-only and immutable places


def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True, capture_output=True)


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def can_mount() -> str | None:
    if os.geteuid() != 0:
        return "needs root to mount a small tmpfs"
    d = Path(tempfile.mkdtemp())
    try:
        _mount_tmpfs(d, "64k")
    except subprocess.CalledProcessError as e:
        return f"cannot mount tmpfs: {e.stderr.decode().strip()}"
    finally:
        _umount(d)
        d.rmdir()
    return None


def can_chattr() -> str | None:
    d = Path(tempfile.mkdtemp())
    try:
        (d / "f").write_text("x")
        r = subprocess.run(["chattr", "+i", str(d / "f")], capture_output=True)
        if r.returncode:
            return "chattr +i is not supported here"
        subprocess.run(["chattr", "-i", str(d / "f")], capture_output=True)
        return None
    except FileNotFoundError:
        return "no chattr"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _disk_cases():
    def grow(ws):  # room again: the same command must continue
        subprocess.run(["mount", "-o", "remount,size=64m", str(ws / "disk")], check=True, capture_output=True)

    def full_then(ws, argv):
        grow(ws)
        return Step(argv, "ok")

    for size, label in (("300k", "checkpoint"), ("60k", "first-log")):
        case(
            f"disk-full-train-at-{label}",
            "disk full",
            [],
            [Step([*TRAIN, "--out", "disk/run"], "refuse")],
            lambda ws, size=size: _mount_tmpfs(ws / "disk", size),
            then=lambda ws: full_then(ws, [*TRAIN, "--out", "disk/run", "--resume", "auto"]),
            check=steps_once(2, "disk/run"),
            teardown=lambda ws: _umount(ws / "disk"),
            needs=can_mount,
        )
    case(
        "disk-full-resume-with-users-file-beside",
        "disk full",
        [],
        [
            Step([*TRAIN, "--out", "disk/run"], "any"),
            Step([*TRAIN, "--train.steps", "6", "--out", "disk/run", "--resume", "auto"], "any"),
        ],
        lambda ws: (_mount_tmpfs(ws / "disk", "420k"), write(ws / "disk" / "keep.txt", "user's\n")),
        then=lambda ws: full_then(ws, [*TRAIN, "--train.steps", "6", "--out", "disk/run", "--resume", "auto"]),
        check=steps_once(6, "disk/run"),
        teardown=lambda ws: _umount(ws / "disk"),
        needs=can_mount,
    )
    prep = ["data", "prepare", "embedded", "--tokenizer", "byte", "--out", "disk/prep", "--num-proc", "1", "--quiet"]
    case(
        "disk-full-data-prepare",
        "disk full",
        [],
        [Step(prep, "refuse")],
        lambda ws: _mount_tmpfs(ws / "disk", "500k"),
        then=lambda ws: full_then(ws, prep),
        teardown=lambda ws: _umount(ws / "disk"),
        needs=can_mount,
    )
    exp = ["export", "--checkpoint", "run/checkpoint", "--format", "hf", "--out", "disk/hf"]
    case(
        "disk-full-export-hf",
        "disk full",
        ["run"],
        [Step(exp, "refuse")],
        lambda ws: _mount_tmpfs(ws / "disk", "100k"),
        then=lambda ws: full_then(ws, exp),
        teardown=lambda ws: _umount(ws / "disk"),
        needs=can_mount,
    )

    def readonly(ws):
        _mount_tmpfs(ws / "ro", "64m")
        shutil.copytree(ws / "run", ws / "ro" / "run", symlinks=True)
        subprocess.run(["mount", "-o", "remount,ro", str(ws / "ro")], check=True, capture_output=True)

    case(
        "read-only-filesystem-resume",
        "read-only",
        ["run"],
        [
            Step([*TRAIN, "--train.steps", "4", "--out", "ro/run", "--resume", "auto"], "refuse"),
            Step([*TRAIN, "--out", "ro/run", "--overwrite"], "refuse"),
            Step([*TRAIN, "--out", "ro/new"], "refuse"),
        ],
        readonly,
        teardown=lambda ws: _umount(ws / "ro"),
        needs=can_mount,
    )
    case(
        "immutable-config-yaml-overwrite",
        "read-only",
        ["run"],
        [Step(OVERWRITE), Step(RESUME)],
        lambda ws: subprocess.run(["chattr", "+i", str(ws / "run" / "config.yaml")], check=True),
        teardown=lambda ws: subprocess.run(["chattr", "-i", str(ws / "run" / "config.yaml")], capture_output=True),
        needs=can_chattr,
    )
    case(
        "immutable-step-checkpoint-prune",
        "read-only",
        ["run"],
        [Step(RESUME)],
        lambda ws: subprocess.run(["chattr", "+i", str(ws / "run" / "step_0000001" / "meta.json")], check=True),
        teardown=lambda ws: subprocess.run(["chattr", "-R", "-i", str(ws / "run")], capture_output=True),
        needs=can_chattr,
    )


# --- G. concurrent writers, and a killed parallel prepare


def _concurrent_cases():
    prep = ["data", "prepare", "embedded", "--tokenizer", "byte", "--out", "prep", "--num-proc", "1", "--quiet"]
    case(
        "concurrent-prepare-same-out-x3",
        "concurrent",
        [],
        [Step(prep, "any", parallel=3)],
        then=lambda ws: Step([*TRAIN, "--data", "prep", "--out", "r2"], "ok"),
    )
    case(
        "concurrent-prepare-different-sources",
        "concurrent",
        [],
        [
            Step(
                prep,
                "any",
                alongside=[
                    "data",
                    "prepare",
                    "stdlib",
                    "--tokenizer",
                    "byte",
                    "--out",
                    "prep",
                    "--num-proc",
                    "1",
                    "--max-documents",
                    "50",
                    "--quiet",
                ],
            )
        ],
        then=lambda ws: Step([*TRAIN, "--data", "prep", "--out", "r2"], "ok"),
    )
    case(
        "concurrent-train-same-out-x2",
        "concurrent",
        [],
        [Step([*TRAIN, "--out", "run"], "any", parallel=2)],
        then=lambda ws: Step([*TRAIN, "--train.steps", "3", "--out", "run", "--resume", "auto"], "ok"),
        check=steps_once(3),
    )
    case(
        "concurrent-resume-same-run-x2",
        "concurrent",
        ["run"],
        [Step(RESUME, "any", parallel=2)],
        then=lambda ws: Step(RESUME, "ok"),
        check=steps_once(4),
    )
    case(
        "concurrent-overwrite-and-resume",
        "concurrent",
        ["run"],
        [Step(OVERWRITE, "any", parallel=2)],
        then=lambda ws: Step(RESUME, "ok"),
    )


def _orphans(ws: Path) -> list[int]:
    """Processes still running that were started for this case (they carry ADVERSARIAL_CASE=ws)."""
    mark = f"ADVERSARIAL_CASE={ws}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if mark in (d / "environ").read_bytes().split(b"\0"):
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def _killed_prepare(ws: Path) -> list[Result]:
    """kill -9 of a parallel prepare once its workers run: none of its processes may outlive it."""
    write(ws / "corpus" / "big.txt", "\n\n".join(f"document {i} " + "words and more words " * 40 for i in range(30000)))
    argv = [
        "data",
        "prepare",
        "corpus",
        "--tokenizer",
        "byte",
        "--out",
        "prep",
        "--num-proc",
        "2",
        "--shard-mb",
        "1",
        "--quiet",
    ]
    t0 = time.monotonic()
    p = start(ws, argv)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_orphans(ws)) < 3 and p.poll() is None:
        time.sleep(0.2)
    os.kill(p.pid, signal.SIGKILL)
    r = finish(p, argv, t0)
    r.rc = 137 if r.rc == -9 else r.rc
    time.sleep(3)
    left = _orphans(ws)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left:
        r.err += f"\n[harness] {len(left)} process(es) outlived the killed prepare: {left}"
    return [r]


# --- H. odd names and inputs


def _name_cases():
    for label, name in [
        ("unicode", "ラン 走る"),
        ("spaces-and-quotes", "my \"run\" 'x'"),
        ("leading-dash-dir", "./-run"),
        ("emoji", "run-\U0001f525"),
    ]:
        case(
            f"name-{label}",
            "odd name",
            [],
            [Step([*TRAIN, "--out", name], "ok")],
            then=lambda ws, name=name: Step([*TRAIN, "--train.steps", "3", "--out", name, "--resume", "auto"], "ok"),
        )
    case("name-newline", "odd name", [], [Step([*TRAIN, "--out", "a\nb"], "any")])
    case("name-not-utf8", "odd name", [], [Step([*TRAIN, "--out", os.fsencode("run-") + b"\xff\xfe"], "refuse")])
    case("name-255-bytes-of-utf8", "odd name", [], [Step([*TRAIN, "--out", "é" * 128], "refuse")])
    case(
        "out-through-symlink-chain-into-another-run",
        "odd name",
        ["run"],
        [Step([*TRAIN, "--out", "l1", "--overwrite"])],
        lambda ws: (
            (ws / "l2").symlink_to(ws / "run"),
            (ws / "l1").symlink_to(ws / "l2"),
            write(ws / "run" / "mine.txt", "user's\n"),
        ),
    )
    case(
        "out-is-a-hardlinked-file",
        "odd name",
        [],
        [Step([*TRAIN, "--out", "f"], "refuse")],
        lambda ws: (victim(ws), os.link(ws / "victim" / "thesis.txt", ws / "f")),
    )
    case(
        "out-inside-the-resumed-checkpoint",
        "odd name",
        ["run"],
        [Step([*TRAIN, "--train.steps", "4", "--resume", "run/checkpoint", "--out", "run/checkpoint/inner"], "refuse")],
    )

    def split_files(ws):
        write(ws / "d" / "train.txt", "\n\n".join(f"training document {i} with words" for i in range(200)))
        write(ws / "d" / "val.txt", "\n\n".join(f"held out document {i} with words" for i in range(20)))

    case(
        "val-fraction-with-split-named-files",
        "odd input",
        [],
        [Step([*TRAIN, "--data", "d", "--data.val_fraction", "0.3", "--out", "r3"], "refuse")],
        split_files,
    )
    case(
        "val-fraction-prepare-with-split-named-files",
        "odd input",
        [],
        [
            Step(
                ["data", "prepare", "d", "--tokenizer", "byte", "--out", "p3", "--val-fraction", "0.3", "--quiet"],
                "refuse",
            )
        ],
        split_files,
    )
    case(
        "config-file-is-binary-yaml-name",
        "odd input",
        [],
        [Step([*TRAIN, "--config", "c.yaml", "--out", "r4"], "refuse")],
        lambda ws: write(ws / "c.yaml", bytes(range(256))),
    )
    case(
        "rewarmup-inf-growth",
        "odd input",
        ["run"],
        [
            Step(
                ["grow", "--checkpoint", "run/checkpoint", "--width.hidden", "48", "--rewarmup", "inf,5", "--out", "g"],
                "refuse",
            )
        ],
    )


# --- I. the study runner's ledger (issue 46): tampered run directories and records, signals, orphan workers

STUDY = [
    str(ROOT / "benchmarks" / "studies" / "regime_study.py"),
    "--scale",
    "smoke",
    "--parts",
    "tune",
    "--lrs",
    "0.016,0.032,0.008",
    "--results",
    "study/res",
    "--out",
    "study/runs",
]
STUDY_RUN = "study/runs/smoke/tune/small/lr{lr}/seed100"
STUDY_RECORD = "study/res/progressive-regime/runs/tune/small/lr{lr}/seed100.json"


def _study_cases():
    def edit_done(ws):
        d = ws / STUDY_RUN.format(lr="0.016") / "done.json"
        done = json.loads(d.read_text())
        d.write_text(json.dumps({**done, "val_loss": 0.5}))
        (ws / STUDY_RECORD.format(lr="0.016")).unlink()

    def copy_done(ws):
        shutil.copy(ws / STUDY_RUN.format(lr="0.032") / "done.json", ws / STUDY_RUN.format(lr="0.016") / "done.json")
        (ws / STUDY_RECORD.format(lr="0.016")).unlink()

    def not_recorded(ws, results):
        rec = ws / STUDY_RECORD.format(lr="0.016")
        return f"loss: {rec.name} recorded from a run directory whose done.json was changed" if rec.exists() else None

    case("study-done-json-edited", "study ledger", ["study"], [Step(STUDY, "refuse")], edit_done, check=not_recorded)
    case(
        "study-done-json-of-another-lr",
        "study ledger",
        ["study"],
        [Step(STUDY, "refuse")],
        copy_done,
        check=not_recorded,
    )

    def edit_record(how):
        def setup(ws):
            p = ws / STUDY_RECORD.format(lr="0.016")
            rec = json.loads(p.read_text())
            p.write_text(json.dumps(how(rec)))

        return setup

    for label, how in [
        ("val-loss-edited", lambda r: {**r, "final": {**r["final"], "val_loss": 0.5}}),
        ("empty-list", lambda r: []),
        ("val-loss-not-a-number", lambda r: {**r, "final": {"val_loss": "n/a"}}),
        ("no-final", lambda r: {k: v for k, v in r.items() if k != "final"}),
    ]:
        case(f"study-record-{label}", "study ledger", ["study"], [Step([*STUDY, "--plot"], "refuse")], edit_record(how))

    def split_dtypes(ws):
        import numpy as np

        (ws / "bins").mkdir()
        np.arange(1, 5000, dtype=np.uint16).astype(np.uint16).tofile(ws / "bins" / "train.bin")
        (np.arange(1, 900) % 250 + 1).astype(np.uint32).tofile(ws / "bins" / "val.bin")

    case(
        "split-dtypes-uint16-train-uint32-val",
        "study ledger",
        [],
        [Step([*TRAIN, "--data", "bins", "--out", "r"], "refuse")],
        split_dtypes,
    )
    CASES.append(Case("study-sigterm-two-workers", "study signals", ()))
    CASES.append(Case("study-kill-9-orphans", "study signals", ()))


def _signalled_study(ws: Path, sig: int) -> list[Result]:
    """A two-worker study signalled once its first run is in the ledger: SIGTERM must end in one line with the
    command that continues it; no worker may outlive it (SIGTERM or kill -9)."""
    argv = [*STUDY, "--workers", "2"]
    t0 = time.monotonic()
    p = start(ws, argv)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None and not list((ws / "study" / "res").rglob("seed*.json")):
        time.sleep(0.2)
    os.kill(p.pid, sig)
    r = finish(p, argv, t0)
    r.rc = 128 + sig if r.rc == -sig else r.rc
    time.sleep(3)
    left = _orphans(ws)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left:
        r.err += f"\n[harness] {len(left)} process(es) outlived the signalled study: {left}"
    elif sig == signal.SIGTERM and "continue with:" not in r.err:
        r.err += "\n[harness] the study's last line does not say how to continue it"
    return [r]


# ---------------------------------------------------------------- templates

TEMPLATES = {
    "run": lambda d: [[*TRAIN, "--out", d / "run"]],
    "run_tb": lambda d: [[*TRAIN, "--train.log_to", "jsonl,tensorboard", "--out", d / "run"]],
    "prep": lambda d: [
        ["data", "prepare", "embedded", "--tokenizer", "byte", "--out", d / "prep", "--num-proc", "1", "--quiet"]
    ],
    "hf": lambda d: [
        [*TRAIN, "--out", d / "src"],
        ["export", "--checkpoint", d / "src" / "checkpoint", "--format", "hf", "--out", d / "hf"],
    ],
    "exp": lambda d: [[*EXPERIMENT[: -len(TINY) - 2], "--out", d / "exp", *TINY]],
    "study": lambda d: [STUDY],
}
TEMPLATE_DIR = {"run": "run", "run_tb": "run", "prep": "prep", "hf": "hf", "exp": "exp", "study": "study"}


def build_templates(names: set, work: Path) -> dict:
    built = {}
    for name in sorted(names):
        d = work / f"template-{name}"
        d.mkdir()
        for argv in TEMPLATES[name](d):
            r = cli(d, argv, timeout=TEMPLATE_TIMEOUT)
            if r.rc != 0:
                raise SystemExit(f"template {name} failed (rc {r.rc}): {r.err.strip()[-500:]}")
        built[name] = d / TEMPLATE_DIR[name]
    return built


# ---------------------------------------------------------------- classification


def classify(c: Case, results: list[Result], lost: list[str], extra: str | None) -> tuple[str, str]:
    problems, refused = [], False
    for r, want in results:
        tag = f"`{' '.join(r.argv[:2])}`"
        if r.rc == "hang":
            problems.append(f"{tag} hung ({TIMEOUT} s)")
            continue
        text = r.err + r.out
        if "Traceback (most recent call last)" in text:
            last = [line for line in r.err.strip().splitlines() if line.strip()][-1:] or ["?"]
            problems.append(f"{tag} traceback: {last[0][:160]}")
            continue
        if want == "killed":
            refused = True  # continued after a kill: a recovery
            if r.rc != 137:
                problems.append(f"{tag} was not killed at its crash point (rc {r.rc})")
            continue
        if want == "stopped":  # SIGTERM asked for a stop: exit 143 and one line saying where it stopped
            refused = True
            said = [line for line in r.err.splitlines() if line.strip()]
            if r.rc != 143 or len(said) != 1:
                problems.append(f"{tag} stopped by SIGTERM with exit {r.rc} and {len(said)} stderr line(s)")
            continue
        if r.rc not in (0, 2):
            problems.append(f"{tag} exit {r.rc}: {r.err.strip()[-160:]}")
            continue
        # `nexus CMD: error: ...`, or a benchmark script's `error: ...`
        errors = [
            line
            for line in r.err.splitlines()
            if (line.startswith("nexus") and ": error:" in line) or line.startswith("error: ")
        ]
        if r.rc == 2:
            refused = True
            stray = [line for line in r.err.splitlines() if line.strip() and not line.startswith(("nexus", "error: "))]
            if len(errors) != 1 or stray:
                problems.append(f"{tag} exit 2 without exactly one error line: {r.err.strip()[:160]!r}")
            elif want == "ok":
                problems.append(f"{tag} refused a legitimate command: {errors[0][:160]}")
        elif want == "refuse":
            said = [
                line
                for line in r.err.splitlines()
                if line.startswith("nexus") and ("note" in line or "warning" in line)
            ]
            if not said:
                problems.append(f"{tag} silently accepted (exit 0, expected a refusal or a line saying what it did)")
    if lost:
        return "loss", "; ".join(lost[:3])
    if extra and extra.startswith("loss:"):
        return "loss", extra[5:].strip()
    if extra:
        problems.append(extra.removeprefix("unclean:").strip())
    if problems:
        return "unclean", "; ".join(problems[:3])
    return ("clean" if refused else "valid"), ""


def run_case(c: Case, templates: dict, work: Path, keep: Path | None) -> dict:
    ws = Path(tempfile.mkdtemp(prefix="case-", dir=work))
    t0 = time.monotonic()
    results, lost, extra = [], [], None
    try:
        for t in c.templates:
            shutil.copytree(templates[t], ws / TEMPLATE_DIR[t], symlinks=True)
        before = snapshot(ws)
        if c.setup:
            c.setup(ws)
        user = {rel: v for rel, v in user_entries(before, snapshot(ws)).items() if not nexus_lock(ws / rel)}
        if c.name == "kill-prepare-parallel-orphans":
            results = [(r, "killed") for r in _killed_prepare(ws)]
            if "outlived" in results[0][0].err:
                extra = "unclean: " + results[0][0].err.strip().splitlines()[-1].removeprefix("[harness] ")
        if c.name in ("study-sigterm-two-workers", "study-kill-9-orphans"):
            sig = signal.SIGTERM if "sigterm" in c.name else signal.SIGKILL
            results = [(r, "stopped" if sig == signal.SIGTERM else "killed") for r in _signalled_study(ws, sig)]
            if "[harness]" in results[0][0].err:
                extra = "unclean: " + results[0][0].err.strip().splitlines()[-1].removeprefix("[harness] ")
        for s in c.steps:
            t1 = time.monotonic()
            runs = [s.argv] * s.parallel + ([s.alongside] if s.alongside else [])
            procs = [(start(ws, argv, s.env), argv) for argv in runs]
            results += [(finish(p, argv, t1), s.expect) for p, argv in procs]
        if c.then and not any(r.rc == "hang" for r, _ in results):
            s = c.then(ws)
            r = cli(ws, s.argv, s.env)
            results.append((r, "ok"))
            if r.rc != 0 and r.rc != "hang" and "Traceback" not in r.err:
                lost.append(f"cannot continue: `{' '.join(s.argv[:2])} ...` exit {r.rc}: {r.err.strip()[-200:]}")
        after = snapshot(ws)
        for rel, v in sorted(user.items()):
            if after.get(rel) != v:
                lost.append(f"user's {rel!r} {'deleted' if rel not in after else 'changed'}")
        if c.check and not lost:
            extra = c.check(ws, results) or extra
    except Exception as e:  # a harness failure is reported as such, never as a nexus verdict
        return {
            "name": c.name,
            "group": c.group,
            "verdict": "harness-error",
            "detail": f"{type(e).__name__}: {e}",
            "seconds": round(time.monotonic() - t0, 1),
        }
    finally:
        if c.teardown:
            try:
                c.teardown(ws)
            except Exception:
                pass
        if keep:
            shutil.copytree(
                ws,
                keep / c.name.replace("/", "_"),
                symlinks=True,
                dirs_exist_ok=True,
                ignore_dangling_symlinks=True,
                copy_function=shutil.copy,
            )
    verdict, detail = classify(c, results, lost, extra)
    subprocess.run(["chattr", "-R", "-i", str(ws)], capture_output=True)
    shutil.rmtree(ws, ignore_errors=True)
    return {
        "name": c.name,
        "group": c.group,
        "verdict": verdict,
        "detail": detail,
        "exits": [r.rc for r, _ in results],
        "seconds": round(time.monotonic() - t0, 1),
        "commands": [" ".join(r.argv) for r, _ in results][:4],
        "said": [
            next((line for line in r.err.splitlines() if ": error:" in line), r.err.strip()[-200:])[:300]
            for r, _ in results
        ],
    }


def all_cases() -> list[Case]:
    CASES.clear()
    _forge_cases()
    _lock_cases()
    _adopt_cases()
    _edited_cases()
    _disk_cases()
    _concurrent_cases()
    _name_cases()
    _study_cases()
    CASES.append(Case("kill-prepare-parallel-orphans", "kill", ()))
    return list(CASES)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", help="run the cases whose name matches this glob (or contains it)")
    ap.add_argument("--json", default="adversarial-results.json", help="where the results go (JSON)")
    ap.add_argument("--keep", type=Path, help="copy every case's workspace here after it runs")
    ap.add_argument("--list", action="store_true", help="list the static cases and exit")
    ap.add_argument("--jobs", type=int, default=1, help="cases at once (only 1 is supported: the machine is shared)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still unmount and clean up when stopped
    if args.jobs != 1:
        ap.error("--jobs: only 1 is supported (valid: 1)")
    cases = all_cases()
    if args.list:
        print(
            "\n".join(f"{c.group:16} {c.name}" for c in cases) + "\n(+ the kill cases found by tracing the scenarios)"
        )
        return 0

    def wanted(name):
        return not args.only or fnmatch.fnmatch(name, args.only) or args.only in name

    work = Path(tempfile.mkdtemp(prefix="nexus-adversarial-"))
    # one corpus cache for all: the embedded corpus is tokenized once (the `prepare` scenario kills that)
    SHARED_CACHE.append(work / "cache")
    started = time.monotonic()
    try:
        kill_wanted = any(wanted(f"kill-{sc}-at-x") for sc in SCENARIOS) or (args.only or "").startswith("kill")
        need = {"run"} | {t for c in cases if wanted(c.name) for t in c.templates}  # "run" also warms the cache
        if kill_wanted:
            need |= {t for tmpl, *_ in SCENARIOS.values() for t in tmpl}
        templates = build_templates(need, work)
        unreached = set()
        if kill_wanted:
            kills, unreached = discover_kills(templates, work)
            cases += [kill_case(sc, p) for sc, p in kills]
        cases = [c for c in cases if wanted(c.name)]
        rows = []
        for i, c in enumerate(cases, 1):
            why = c.needs() if c.needs else None
            row = (
                {"name": c.name, "group": c.group, "verdict": "skipped", "detail": why, "seconds": 0}
                if why
                else run_case(c, templates, work, args.keep)
            )
            rows.append(row)
            print(
                f"[{i:3}/{len(cases)}] {row['verdict']:13} {row['seconds']:6.1f}s  {c.name}"
                + (f"\n      {row['detail']}" if row["detail"] else ""),
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    counts = {
        v: sum(r["verdict"] == v for r in rows)
        for v in ("valid", "clean", "unclean", "loss", "skipped", "harness-error")
    }
    import torch

    git = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    summary = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git,
        "command": "python tools/adversarial.py" + (f" --only {args.only!r}" if args.only else ""),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cases": len(rows),
        "counts": counts,
        "unreached_crash_points": sorted(unreached),
        "seconds": round(time.monotonic() - started),
        # CPU time of every nexus process the pass ran: the cost on an idle machine, whatever the load
        "child_cpu_seconds": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
            + resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime
        ),
        "results": rows,
    }
    Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\n{'group':18}{'valid':>7}{'clean':>7}{'unclean':>9}{'loss':>6}{'other':>7}")
    for g in dict.fromkeys(r["group"] for r in rows):
        rs = [r for r in rows if r["group"] == g]
        n = {v: sum(r["verdict"] == v for r in rs) for v in ("valid", "clean", "unclean", "loss")}
        print(f"{g:18}{n['valid']:7}{n['clean']:7}{n['unclean']:9}{n['loss']:6}{len(rs) - sum(n.values()):7}")
    print(
        f"{'total':18}{counts['valid']:7}{counts['clean']:7}{counts['unclean']:9}{counts['loss']:6}"
        f"{counts['skipped'] + counts['harness-error']:7}   ({summary['seconds']} s, "
        f"{summary['child_cpu_seconds']} s of "
        f"CPU, commit {git}, "
        f"cpu {summary['cpu_capability']}) -> {args.json}"
    )
    if unreached:
        print(f"crash points no scenario reaches: {sorted(unreached)}")
    return 1 if counts["unclean"] or counts["loss"] or counts["harness-error"] or unreached else 0


if __name__ == "__main__":
    sys.exit(main())
