"""Every command in README.md and docs/*.md is run by this test in a cheap form (issue 50 item 5).

The commands are extracted from the fenced shell blocks (```bash, ```sh, ```shell, ```console; in an unlabelled
block the lines that start with a program, or a transcript's `$ ` lines), `&&` chains split into their parts.
Each is checked in the cheapest form that still exercises it:

- run: executed as written (`nexus presets`, `nexus config`, `--list`, `--help`, `nexus analyze params|flops`);
- plan: `nexus experiment ...` planned in full (every run's config built and validated, a growth dry-run on the
  meta device), with training stopped before its first step;
- config: `nexus train` (a new run) merged and validated as the run would be (preset, --config, overrides, growth
  flags, hooks), without training or touching the output directory;
- parse: commands that name a checkpoint, run directory or corpus of the reader's: the real parser takes every
  flag and value, and the dotted overrides are set on a config and validated;
- script: a benchmark or tool script, `--help` run in a fresh interpreter, every flag the docs give it in its help;
- pip: the extras named exist in pyproject.toml;
- listed in NOT_RUN with the reason (installing, launching several processes on a cluster, the suite itself).

README's quickstart chain also runs for real with tiny overrides (test_readme_quickstart_runs_with_tiny_steps).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from nexus.cli import COMMANDS, build_parser, main, refuse_unknown_flags_early

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
PROGRAMS = {"nexus", "python", "python3", "torchrun", "srun", "lm_eval", "nexus-lm-eval", "pip"}

# Commands not run, each with why (matched by the start of the command, environment variables stripped).
NOT_RUN = {
    "python3 -m venv": "creates a virtual environment (the install itself)",
    ". .venv/bin/activate": "activates that environment in the reader's shell",
    "python -m pytest": "the test suite itself",
    "ruff ": "the formatter and linter .ci/run runs before the tests (the suite holds no copy of them)",
    "mypy": "the type checker .ci/run runs before the tests",
    "lm_eval ": "lm-eval's own CLI on a task's dataset (hellaswag) or the reader's task files; the adapter is "
    "tested in tests/test_lm_eval*.py",
    "python -m lm_eval ": "as lm_eval",
    "nexus-lm-eval ": "as lm_eval",
    "set -euo pipefail": "a line of the SLURM batch script (needs a cluster)",
    "HEAD_HOST=": "a line of the SLURM batch script (needs a cluster)",
    "export ": "a line of the SLURM batch script (needs a cluster)",
}
# `--lm-eval` needs lm-eval's task files or datasets: parsed only.
PARSE_ONLY_FLAGS = ("--lm-eval", "--push-to-hub", "--resume", "--init-from", "--checkpoint", "--checkpoints", "--hf")


def _blocks(text: str):
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        yield m.group(1), i + 2, lines[i + 1 : j]
        i = j + 1


def _strip_comment(s: str) -> str:
    """The command without a trailing `# ...` comment (a # inside quotes stays)."""
    quote = None
    for k, ch in enumerate(s):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (k == 0 or s[k - 1].isspace()):
            return s[:k].rstrip()
    return s.rstrip()


def _program(cmd: str) -> str:
    words = cmd.split()
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value prefixes
        words = words[1:]
    return words[0] if words else ""


def _is_command(s: str) -> bool:
    words = s.split()
    if not words or _program(s) not in PROGRAMS:
        return False
    if _program(s) == "nexus":  # output lines like "nexus: baseline-micro | ..." or "nexus env entry: ..."
        rest = s.split(None, 1)[1].split() if len(s.split()) > 1 else []
        return not rest or rest[0].startswith("-") or rest[0] in COMMANDS
    return True


def doc_commands() -> list[tuple[str, str]]:
    out = []
    for path in DOCS:
        for lang, start, body in _blocks(path.read_text(encoding="utf-8")):
            if lang not in SHELL_LANGS and lang != "":
                continue
            transcript = any(line.lstrip().startswith("$ ") for line in body)
            k = 0
            while k < len(body):
                n, s = start + k, body[k].strip()
                k += 1
                if transcript:
                    if not s.startswith("$ "):
                        continue
                    s = s[2:]
                while s.endswith("\\") and k < len(body):
                    s = s[:-1].rstrip() + " " + body[k].strip()
                    k += 1
                s = _strip_comment(s)
                if not s or (lang not in SHELL_LANGS and not transcript and not _is_command(s)):
                    continue
                for part in (p.strip() for p in s.split("&&")):
                    out.append((f"{path.relative_to(ROOT)}:{n}", part))
    return out


COMMANDS_IN_DOCS = doc_commands()


def test_the_docs_hold_commands_to_check():
    """The extraction finds the README's command blocks (a change in fence style would silently empty this test)."""
    where = {w.split(":")[0] for w, _ in COMMANDS_IN_DOCS}
    assert len(COMMANDS_IN_DOCS) > 150 and "README.md" in where and "docs/workflows.md" in where


def _nexus_argv(cmd: str) -> list[str] | None:
    """The nexus arguments of `nexus ...`, `python -m nexus ...`, `torchrun ... -m nexus ...` (env stripped)."""
    words = shlex.split(cmd)
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    if words and words[0] == "nexus":
        return words[1:]
    if "-m" in words and words[words.index("-m") + 1 :][:1] == ["nexus"]:
        return words[words.index("-m") + 2 :]
    return None


def _mode(argv: list[str]) -> str:
    word = next((a for a in argv if not a.startswith("-")), "train")
    if word in ("presets", "config") or {"--list", "--help", "-h"} & set(argv):
        return "run"
    if word == "analyze" and "--preset" in argv:
        return "run"
    if any(a.endswith((".yaml", ".yml")) for a in argv):  # a preset or config file of the reader's
        return "parse"
    if word == "experiment" and "--lm-eval" not in argv:
        return "plan"
    if word == "train" and not set(argv) & set(PARSE_ONLY_FLAGS):
        return "config"
    return "parse"


class Stop(Exception):
    """Raised where an experiment would start training: its plan is complete."""


def _check_nexus(argv: list[str], mode: str, monkeypatch) -> None:
    from nexus.config_overrides import parse_overrides
    from nexus.presets import get_preset

    if mode == "run":
        assert main(argv) == 0
        return
    if mode == "plan":
        import nexus.experiments.compare as C
        import nexus.experiments.pair as PR
        import nexus.experiments.progressive as P

        for mod, name in ((P, "run_progressive"), (C, "run_compare"), (PR, "run_pair")):
            monkeypatch.setattr(mod, name, lambda *a, **k: (_ for _ in ()).throw(Stop()))
        with pytest.raises(Stop):
            main(argv)
        return
    word = next((a for a in argv if not a.startswith("-")), "train")
    refuse_unknown_flags_early(word, argv)
    args, extra = build_parser(word).parse_known_args(argv if argv else ["train"])
    assert not extra or getattr(args, "accepts_overrides", False), f"unrecognized arguments {extra}"
    if args.command == "train":
        from nexus.cli.train import _plan_start, flag_overrides

        extra, growth = flag_overrides(args, extra)
        if mode == "config":
            _plan_start(args, extra, None, growth=growth)  # merged, hooks added, validated, hooks built
            return
    if extra:  # the dotted overrides name real fields with valid values
        parse_overrides(get_preset("baseline-tiny"), list(extra)).validate()


def _ids(items):
    return [w for w, _ in items]


NEXUS = [(w, c) for w, c in COMMANDS_IN_DOCS if _nexus_argv(c) is not None]


@pytest.mark.parametrize("where, cmd", NEXUS, ids=_ids(NEXUS))
def test_every_nexus_command_in_the_docs_runs_in_a_cheap_form(where, cmd, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # whatever a command writes lands here
    argv = _nexus_argv(cmd)
    try:
        _check_nexus(argv, _mode(argv), monkeypatch)
    except SystemExit as e:  # argparse's refusal
        pytest.fail(f"{where}: `{cmd}` is refused by the parser: {capsys.readouterr().err.strip()} ({e})")
    except Exception as e:
        pytest.fail(f"{where}: `{cmd}` fails ({_mode(argv)}): {type(e).__name__}: {e}")


def _script(cmd: str) -> tuple[str, list[str]] | None:
    words = shlex.split(cmd)
    while words and (re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]) or words[0] in ("nice", "-n", "5")):
        words = words[1:]
    if words[:1] in (["python"], ["python3"]) and len(words) > 1:
        if words[1] == "-m" and words[2:3] == ["nexus.cli.env_train"]:
            return "-m nexus.cli.env_train", words[3:]
        if words[1].endswith(".py"):
            return words[1], words[2:]
    return None


SCRIPTS: dict[str, list[tuple[str, list[str]]]] = {}
for _w, _c in COMMANDS_IN_DOCS:
    if _nexus_argv(_c) is None and _script(_c) is not None:
        _s, _a = _script(_c)
        SCRIPTS.setdefault(_s, []).append((_w, _a))


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_script_in_the_docs_exists_and_takes_the_flags_the_docs_give_it(script):
    cmd = [sys.executable, *script.split(), "--help"] if script.startswith("-m") else [sys.executable, script, "--help"]
    done = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 0, f"`{' '.join(cmd)}`: {done.stderr.strip()[-500:]}"
    for where, args in SCRIPTS[script]:
        for a in args:
            flag = a.split("=", 1)[0]
            if flag.startswith("--") and flag != "--help":
                assert flag in done.stdout, f"{where}: {script} has no option {flag} (its --help lists none)"


PIPS = [(w, c) for w, c in COMMANDS_IN_DOCS if _program(c) == "pip"]


@pytest.mark.parametrize("where, cmd", PIPS, ids=_ids(PIPS))
def test_every_pip_install_in_the_docs_names_extras_that_exist(where, cmd):
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for word in shlex.split(cmd)[2:]:
        m = re.match(r"^(?:nexus|\.)\[([\w,]+)\]$", word)
        if m:
            assert set(m.group(1).split(",")) <= set(extras), f"{where}: {word} names an extra pyproject lacks"
    assert shlex.split(cmd)[:2] == ["pip", "install"]


def test_every_command_in_the_docs_is_checked_or_listed_with_a_reason():
    checked = {w + c for w, c in [*NEXUS, *PIPS]}
    checked |= {w + c for w, c in COMMANDS_IN_DOCS if _nexus_argv(c) is None and _script(c) is not None}
    rest = [(w, c) for w, c in COMMANDS_IN_DOCS if w + c not in checked]
    unlisted = [
        f"{w}: {c}" for w, c in rest if not any(c.startswith(p) or _strip_env(c).startswith(p) for p in NOT_RUN)
    ]
    assert unlisted == [], "commands neither checked nor listed in NOT_RUN with a reason"


def _strip_env(cmd: str) -> str:
    return re.sub(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+", "", cmd)


def test_readme_quickstart_runs_with_tiny_steps(tmp_path, monkeypatch, capsys):
    """The README's first workflow (train, grow, resume, plot) for real, each step with tiny overrides."""
    text = (ROOT / "README.md").read_text()
    block = next(
        b
        for lang, _, b in _blocks(text)
        if lang == "bash" and any("nexus grow" in ln for ln in b) and any("nexus plot" in ln for ln in b)
    )
    cmds = [_nexus_argv(_strip_comment(ln.strip())) for ln in block if ln.strip()]
    assert [c[0] for c in cmds] == ["train", "grow", "train", "plot"]
    tiny = {
        0: [
            "--train.steps",
            "4",
            "--train.eval_every",
            "2",
            "--train.batch_size",
            "2",
            "--data.seq_len",
            "32",
            "--train.eval_batches",
            "1",
            "--train.sample_every",
            "0",
            "--quiet",
        ],
        1: ["--train.steps", "6"],
        2: ["--quiet"],
        3: [],
    }
    monkeypatch.chdir(tmp_path)
    for i, argv in enumerate(cmds):
        assert main(argv + tiny[i]) == 0, (argv, capsys.readouterr().err)
    out = capsys.readouterr().out
    assert "wrote runs/curves.png and runs/curves.csv" in out


INLINE_STUDY = re.compile(r"`((?:python3? )?benchmarks/studies/regime_study\.py[^`]*)`")


def test_every_main_scale_study_command_in_the_docs_names_the_main_ledger():
    """`regime_study.py --scale main` without `--study progressive-main` reads (and would write) the full-scale
    study's ledger: "0 runs held" where the README's numbers are (issue 50 item 5)."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        spans = INLINE_STUDY.findall(text) + [
            c for w, c in COMMANDS_IN_DOCS if w.startswith(str(path.relative_to(ROOT))) and "regime_study.py" in c
        ]
        found += [(path.name, s) for s in spans if "--scale main" in s]
    assert found  # the README quotes the main-scale study
    assert [f for f in found if "--study progressive-main" not in f[1]] == []
