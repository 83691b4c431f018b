"""The repository's own text: no unresolved merge-conflict markers, and README/docs that agree with the code.

A conflict block committed into README.md once showed users two contradictory benchmark rows. The doc checks below
read text and build parsers only (no command is run), so they stay fast.
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^(<{7} |={7}$|>{7} )", re.M)


def _tracked_text_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in out.splitlines():
        if name.endswith((".md", ".py", ".toml", ".yaml", ".yml", ".txt", ".cfg")) or name.startswith(".ci/"):
            yield ROOT / name


def test_marker_pattern_catches_a_conflict_block():
    planted = "row\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> main\n"
    assert len(MARKER.findall(planted)) == 3


def test_no_tracked_file_holds_a_conflict_marker():
    hits = []
    for path in _tracked_text_files():
        if not path.is_file():
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if MARKER.match(line):
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {line[:40]}")
    assert not hits, "unresolved merge-conflict markers:\n" + "\n".join(hits)


# ---- commands quoted in README.md and docs/ name what exists today ----------------------------------------------
#
# A pasted doc command whose flag, preset or method was renamed fails for every reader. Every `nexus ...` command in
# a code block, an indented block or inline backticks is checked against the real parser: its subcommand exists, each
# `--option` is one of that subcommand's options or an existing dotted config field, each preset and `--method` it
# names exists, and a command in a code block (meant to be pasted) parses. `python benchmarks/X.py --flag` commands
# name an existing script that defines the flag. No command is run: this reads text and builds parsers only.

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# benchmarks/README.md is the index of claims; each claim's figure, command and machine sit in a result card
BENCH_DOCS = [ROOT / "benchmarks" / "README.md", *sorted((ROOT / "benchmarks" / "results").rglob("*.md"))]
NEXUS_CMD = re.compile(r"^(?:\$ )?(?:time )?(?:[A-Z_]+=\S+ )*(?:torchrun .*?-m |python -m )?nexus ([a-z]+\b.*)$")
BENCH_CMD = re.compile(
    r"(?:^|\s)(?:\$ )?(?:[A-Z_]+=\S+ )*python3? ((?:benchmarks|tools)/[\w/]+\.py)((?: [^`#\n|;&]*)?)"
)


def _quoted_lines(text: str):
    """(lineno, text, in_block) for every code-block line (continuations joined) and every inline `code` span
    (one may wrap over lines)."""
    lines = text.splitlines()
    prose: list[tuple[int, str]] = []
    in_fence, i = False, 0
    while i < len(lines):
        line, lineno = lines[i], i + 1
        if line.strip().startswith("```"):
            in_fence = not in_fence
        elif in_fence or line.startswith("    "):
            s = line.strip()
            while s.endswith("\\") and i + 1 < len(lines):
                i += 1
                s = s[:-1] + " " + lines[i].strip()
            yield lineno, s.split(" #")[0].strip(), True
        else:
            prose.append((lineno, line))
        i += 1
    joined = "\n".join(line for _, line in prose)
    for m in re.finditer(r"`([^`]+)`", joined):
        yield prose[joined.count("\n", 0, m.start())][0], " ".join(m.group(1).split()), False


def _doc_nexus_commands(text: str):
    """(lineno, argv after `nexus`, in_block); output lines ("nexus env entry: ...") and synopses are left out."""
    for lineno, s, in_block in _quoted_lines(text):
        m = NEXUS_CMD.match(s)
        if not m:
            continue
        try:
            argv = shlex.split(m.group(1))
        except ValueError:
            continue
        if any(t.endswith(":") for t in argv[:2]) or any(t.startswith("(") for t in argv):
            continue  # printed output, or a usage synopsis with alternatives
        out = []
        for t in argv:
            if t == "...":
                continue
            if t.startswith("[") and t.endswith("]"):  # an optional part: check its first alternative
                t = t[1:-1].split("|")[0]
            out.append(t)
        yield lineno, out, in_block


def _field_exists(dotted: str) -> bool:
    import dataclasses
    import typing

    from nexus.config import KindOptions, RunConfig

    tp = RunConfig
    for part in dotted.split("."):
        if not dataclasses.is_dataclass(tp):
            return False
        fields = {f.name: f for f in dataclasses.fields(tp)}
        if isinstance(tp, type) and issubclass(tp, KindOptions):  # a kind's section: the options of any of its kinds
            fields = {f.name: f for kind in tp.kinds().values() for f in dataclasses.fields(kind)}
        if part not in fields or fields[part].metadata.get("set_by_growth"):
            return False
        tp = typing.get_type_hints(tp)[part] if part in typing.get_type_hints(tp) else str
    # a plain field, or a kind section named by its kind (`--train.optimizer muon`)
    return not dataclasses.is_dataclass(tp) or (isinstance(tp, type) and issubclass(tp, KindOptions))


def _placeholder(name: str) -> bool:
    return name.isupper() or name.startswith("my-")


def _subparsers(parser):
    import argparse

    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def command_problems(text: str, where: str) -> list[str]:
    """Every way a documented `nexus` command disagrees with today's CLI, one line each."""
    from nexus.cli import build_parser
    from nexus.experiments.pair import PAIRS
    from nexus.experiments.progressive import methods
    from nexus.presets import PRESETS

    root = build_parser(None)
    commands = _subparsers(root)
    problems = []
    for lineno, argv, in_block in _doc_nexus_commands(text):
        at = f"{where}:{lineno}: nexus {' '.join(argv)}"
        if argv[0] not in commands:
            problems.append(f"{at}: no subcommand {argv[0]!r}")
            continue
        parser, rest = commands[argv[0]], argv[1:]
        if argv[0] in ("experiment", "data") and rest and not rest[0].startswith("-"):  # commands with actions
            kinds = _subparsers(parser)
            if rest[0] not in kinds:
                problems.append(f"{at}: no {argv[0]} {rest[0]!r}")
                continue
            parser, rest = kinds[rest[0]], rest[1:]
        for i, tok in enumerate(rest):
            if not tok.startswith("--"):
                continue
            opt = tok.split("=")[0]
            if opt not in parser._option_string_actions and not ("." in opt and _field_exists(opt[2:])):
                problems.append(f"{at}: unknown option {opt}")
            if opt in ("--preset", "--presets") and i + 1 < len(rest):
                for name in rest[i + 1].split(","):
                    if not _placeholder(name) and name not in PRESETS:
                        problems.append(f"{at}: unknown preset {name!r}")
            if opt == "--method" and i + 1 < len(rest) and rest[i + 1] not in methods() and rest[i + 1] not in PAIRS:
                problems.append(f"{at}: unknown method {rest[i + 1]!r}")
        if in_block:
            try:
                root.parse_known_args(argv)
            except SystemExit:
                problems.append(f"{at}: does not parse")
    return problems


def bench_problems(text: str, where: str) -> list[str]:
    """`python benchmarks/X.py --flag` quoted in docs: the script exists and defines each flag."""
    problems = []
    for lineno, s, _ in _quoted_lines(text):
        for m in BENCH_CMD.finditer(s):
            script = ROOT / m.group(1)
            if not script.is_file():
                problems.append(f"{where}:{lineno}: no script {m.group(1)}")
                continue
            src = script.read_text()
            for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m.group(2)):
                if f'"{flag}"' not in src and f"'{flag}'" not in src:
                    problems.append(f"{where}:{lineno}: {m.group(1)} has no option {flag}")
    return problems


def test_command_check_catches_a_stale_subcommand_option_and_preset():
    planted = (
        "```\nnexus trian --preset baseline-tiny\nnexus train --preset no-such-preset\n"
        "nexus grow --checkpoint c --out o --delta-q 4\nnexus train --model.no_such_field 3\n"
        "nexus experiment progressive --method sparkling --no-flag\n"
        "nexus experiment progressive --method sparkle\n"
        "python benchmarks/speed/grown_step.py --no-such-flag 3\npython benchmarks/not_there.py\n```\n"
        "inline `nexus experiment compare --presets gated-tiny,not-a-preset` and `nexus eval --lm-eval`\n"
    )
    problems = command_problems(planted, "planted") + bench_problems(planted, "planted")
    for expected in (
        "no subcommand 'trian'",
        "unknown preset 'no-such-preset'",
        "unknown option --delta-q",
        "unknown option --model.no_such_field",
        "unknown option --no-flag",
        "unknown preset 'not-a-preset'",
        "unknown method 'sparkle'",
        "has no option --no-such-flag",
        "no script benchmarks/not_there.py",
    ):
        assert any(expected in p for p in problems), (expected, problems)
    assert not any("--lm-eval" in p for p in problems), problems  # an inline reference need not be a full command


def test_every_documented_command_names_existing_subcommands_options_and_presets():
    problems = []
    for path in DOCS:
        where = str(path.relative_to(ROOT))
        problems += command_problems(path.read_text(), where) + bench_problems(path.read_text(), where)
    for path in BENCH_DOCS:  # result cards quote the commands that produced their figures
        problems += bench_problems(path.read_text(), str(path.relative_to(ROOT)))
    assert not problems, "documented commands that today's CLI does not accept:\n" + "\n".join(problems)


def _expand_braces(s: str) -> list[str]:
    m = re.search(r"\{([^{}]+)\}", s)
    if not m:
        return [s]
    return [x for alt in m.group(1).split(",") for x in _expand_braces(s[: m.start()] + alt + s[m.end() :])]


def table_preset_problems(text: str, where: str) -> list[str]:
    """README's "What is implemented" table: every preset in its "presets (examples)" column exists
    (`a-{b,c}` expanded; `tokenformer-*` and bare suffixes such as `-tiny` are patterns, not names)."""
    from nexus.presets import PRESETS

    problems, header = [], None
    for lineno, line in enumerate(text.splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            header = None
        elif header is None:
            header = cells
        elif "presets (examples)" in header and not set(line) <= set("|-: "):
            for span in re.findall(r"`([^`]+)`", cells[header.index("presets (examples)")]):
                for name in _expand_braces(span):
                    if not name.startswith("-") and "*" not in name and name not in PRESETS:
                        problems.append(f"{where}:{lineno}: unknown preset {name!r}")
    return problems


def test_preset_table_check_catches_a_renamed_preset():
    planted = (
        "| paper | what | presets (examples) | docs |\n|---|---|---|---|\n"
        "| x | y | `baseline-{tiny,huge}`, `tokenformer-*`, every row at `-tiny` | z |\n"
    )
    assert table_preset_problems(planted, "planted") == ["planted:3: unknown preset 'baseline-huge'"]


def test_readme_implemented_table_names_existing_presets():
    problems = table_preset_problems((ROOT / "README.md").read_text(), "README.md")
    assert not problems, "\n".join(problems)


# ---- no markdown table without rows ------------------------------------------------------------------------------
# An edit once kept a results table's header in docs/exoformer.md and dropped its rows, so the text around it cited
# figures ("1.079 to 1.057", "7.9% to 5.7%") that the page no longer showed.

TABLE_SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")


def empty_tables(text: str, where: str) -> list[str]:
    lines = text.splitlines()
    return [
        f"{where}:{i}: table header without rows: {lines[i - 2][:60]}"
        for i, line in enumerate(lines, 1)
        if TABLE_SEPARATOR.match(line) and (i >= len(lines) or not lines[i].startswith("|"))
    ]


def test_empty_table_check_catches_a_header_without_rows():
    assert empty_tables("| a | b |\n|---|---|\n| 1 | 2 |\n", "t") == []
    planted = "| a | b |\n|---|---|\nRaw numbers: 1 2 3\n"
    assert empty_tables(planted, "t") == ["t:2: table header without rows: | a | b |"]


def test_no_doc_table_lost_its_rows():
    problems = [p for path in [*DOCS, *BENCH_DOCS] for p in empty_tables(path.read_text(), str(path.relative_to(ROOT)))]
    assert not problems, "\n".join(problems)


# ---- tests and source files the docs cite exist ------------------------------------------------------------------
# "Held by tests/test_x.py::test_y" is a promise only while that test exists.

PACKAGES = "models|growth|analysis|train|data|eval|export|hf|optim|cli|experiments|presets"
CITED_TEST = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?")
CITED_SRC = re.compile(rf"`(?:src/)?(?:nexus/)?((?:{PACKAGES})/[\w/]+\.py)(?::(\w+))?")


def citation_problems(text: str, where: str) -> list[str]:
    problems = []
    for pattern, base in ((CITED_TEST, ROOT), (CITED_SRC, ROOT / "src" / "nexus")):
        for m in pattern.finditer(text):
            path = base / m.group(1)
            if not path.is_file():
                problems.append(f"{where}: {m.group(0).strip('`')}: no such file")
            elif m.group(2) and not re.search(
                rf"^\s*(?:def|class) {m.group(2)}\b|^{m.group(2)}\s*=", path.read_text(), re.M
            ):
                problems.append(f"{where}: {m.group(0).strip('`')}: no {m.group(2)} in {m.group(1)}")
    return problems


def test_citation_check_catches_a_renamed_test_and_a_moved_module():
    planted = (
        "held by `tests/test_repo_text.py::test_gone` and `tests/test_nowhere.py`; code in "
        "`models/no_such_module.py` and `models/attention.py:NoSuchClass`"
    )
    problems = citation_problems(planted, "planted")
    assert len(problems) == 4, problems
    assert (
        citation_problems(
            "`tests/test_repo_text.py::test_citation_check_catches_a_renamed_test_and_a_moved_module`"
            " and `models/decode.py:PlainDecoder`",
            "ok",
        )
        == []
    )


def test_every_cited_test_and_source_file_exists():
    problems = [
        p for path in [*DOCS, *BENCH_DOCS] for p in citation_problems(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not problems, "\n".join(problems)


# ---- relative links in the benchmark index and result cards resolve -------------------------------------------
# The index links each claim to its script and card, and each card back to its script: a moved or renamed file
# must not leave a claim pointing nowhere.

LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)#\s]+)(?:#[^)\s]*)?\)")


def broken_links(path: Path) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}: link {m.group(1)} resolves to nothing"
        for m in LINK.finditer(path.read_text())
        if not (path.parent / m.group(1)).exists()
    ]


def test_link_check_catches_a_moved_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "here.md").write_text("[ok](here.md) [web](https://x.org/a) [anchor](#a) [gone](old/script.py#L3)")
    assert broken_links(tmp_path / "here.md") == ["here.md: link old/script.py resolves to nothing"]


def test_benchmark_index_and_cards_link_to_existing_files():
    problems = [p for path in BENCH_DOCS for p in broken_links(path)]
    assert not problems, "\n".join(problems)


def test_every_benchmark_script_has_a_row_in_the_index():
    index = (ROOT / "benchmarks" / "README.md").read_text()
    missing = [
        p.name
        for p in (ROOT / "benchmarks").rglob("*.py")  # tools/ (mutation.py, ...) hold no claims
        if not p.name.startswith("_") and f"({p.relative_to(ROOT / 'benchmarks').as_posix()})" not in index
    ]
    assert not missing, f"benchmark scripts without a claim in benchmarks/README.md: {missing}"
