"""`nexus` command line. Each subcommand lives in its own module with `add_parser` and `run`, and
registers itself with one line at its end: `register_command("<name>", __name__)`. A module that
sets `HEAVY_OPTIONS = True` gets `add_parser(sub, detailed=...)`: its options that import torch are
added only when that command runs.

Bad input anywhere (config, preset, override, data file, checkpoint) becomes one line on stderr
and exit code 2; nothing is half-written because every writer goes through a temporary name.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from ..config import ConfigError
from ..plugins import Registry
from ..runtime import tune_cpu_allocator

# subcommand -> its module; every module of this package is imported on the first lookup
COMMANDS: Registry[ModuleType] = Registry(
    "COMMAND", __name__, plugins=False
)  # plugins load at a registry's lookup, inside main()


def register_command(name: str, module_name: str) -> None:
    """Called at the end of a subcommand's module: `register_command("train", __name__)`."""
    COMMANDS.register(name)(sys.modules[module_name])


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's default prints usage too; we promise one line
        self.exit(
            2,
            f"nexus {self.prog.split()[-1] if ' ' in self.prog else ''}: error: {message} (see --help)\n".replace(
                "  ", " "
            ),
        )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """All subcommands; only `command` (or every one when None) gets options that need heavy imports
    (grow's family options import torch), so `nexus presets` and `nexus --help` start without torch."""
    p = OneLineParser(prog="nexus", description="Train, grow, evaluate, analyse and export progressive-training LMs.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, mod in COMMANDS.items():
        if getattr(mod, "HEAVY_OPTIONS", False):
            mod.add_parser(sub, detailed=command in (None, name))
        else:
            mod.add_parser(sub)
    return p


def refuse_unknown_flags_early(word: str, argv: list[str]) -> None:
    """`nexus train --bogus`: a flag no option of the command can be, refused (ConfigError) before the
    growth-family options are built, which imports torch (seconds on a loaded machine). Only without
    plugins (one may add growth flags this cannot know) and when the light parse goes through; anything
    else is left to the full parser."""
    import contextlib
    import io
    import os

    mod = COMMANDS.get(word) if word in COMMANDS else None
    if mod is None or not getattr(mod, "HEAVY_OPTIONS", False) or {"-h", "--help"} & set(argv):
        return
    if os.environ.get("NEXUS_DISABLE_PLUGINS") != "1":
        from importlib.metadata import entry_points

        from ..plugins import PLUGIN_GROUP

        if entry_points(group=PLUGIN_GROUP):
            return
    from .common import growth_flags

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            _, extra = build_parser("").parse_known_args(argv)
    except SystemExit:
        return
    for a in extra:
        name = a.split("=", 1)[0]
        # dotted: a config override, checked with the config; a prefix of a growth flag: argparse's abbreviation
        if a.startswith("--") and "." not in name and not any(f.startswith(name) for f in growth_flags()):
            raise ConfigError(
                f"unrecognized argument {a!r} (valid: --section.field VALUE, e.g. --model.n_layers 4, "
                f"or an option of `nexus {word} --help`)"
            )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tune_cpu_allocator()
    # no command word (`nexus --help`): the top-level help lists commands, not their options
    word = next((a for a in argv if not a.startswith("-")), "" if argv else "train")
    try:
        refuse_unknown_flags_early(word, argv)
        # building a command's options may load plugins (grow's family flags): a broken one is one line
        parser = build_parser(word)
        args, extra = parser.parse_known_args(argv)
    except SystemExit as e:  # argparse errors and --help end here; keep main() callable in-process
        return int(e.code or 0)
    except ConfigError as e:
        print(f"nexus{' ' + word if word in COMMANDS else ''}: error: {e}", file=sys.stderr)
        return 2
    if args.command is None:
        if argv:
            parser.print_help()
            return 2
        args, extra = parser.parse_known_args(["train"])  # `nexus` alone runs the main job

    def command() -> int:
        if extra and not getattr(args, "accepts_overrides", False):
            raise ConfigError(f"unrecognized arguments: {' '.join(extra)}")
        return int(args.func(args, extra) or 0)

    return run_guarded(f"nexus {args.command}", command)


def run_guarded(prog: str, command) -> int:
    """Run `command()` -> its exit code, with the failures a user causes as one stderr line each: bad
        input (ConfigError) exit 2, an aborted training run exit 1, Ctrl-C exit 130 (a training run stopped by
    SIGINT / SIGTERM at a step boundary: 130 / 143, with its checkpoint and the command that resumes it). \
Any other exception is
        an internal fault and keeps its traceback. SIGTERM outside a training loop (which saves a checkpoint first)
        stops the command as Ctrl-C does: one line, exit 143; every writer renames complete files only."""
    import signal
    import threading

    def terminated(signum, frame):
        raise _Terminated

    main_thread = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, terminated) if main_thread else None
    try:
        return int(command() or 0)
    except _Terminated:
        print(f"{prog}: stopped by SIGTERM; nothing was left half-written", file=sys.stderr)
        return 128 + signal.SIGTERM
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        from ..train.trainer import TrainingInterrupted

        if isinstance(e, TrainingInterrupted):  # stopped at a step boundary with a checkpoint
            # an experiment resumes its runs itself when its command is run again
            again = "run the same command again" if prog.startswith("nexus experiment") else None
            print(f"{prog}: {e.message(again)}", file=sys.stderr)
            return 128 + e.signum
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if isinstance(e, RuntimeError):
            from ..train.trainer import TrainingAborted

            if isinstance(e, TrainingAborted):
                print(f"{prog}: training aborted: {e}", file=sys.stderr)
                return 1
        line = file_system_refusal(e)
        if line is None:
            raise  # an internal fault: keep its traceback
        print(f"{prog}: error: {line}", file=sys.stderr)
        return 2
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


class _Terminated(KeyboardInterrupt):
    """SIGTERM outside a training loop: a stop asked for, said in one line."""


def file_system_refusal(e: BaseException) -> str | None:
    """One line for a write the file system refused (disk full, quota, permission, immutable file, read-only
    mount), or None for anything else. Every writer goes through a temporary name and a rename, so no file is
    left half-written. torch's and safetensors' writers lose the errno, so their messages are recognised by
    text."""
    import errno

    text = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
    where = f" writing {e.filename!r}" if isinstance(e, OSError) and e.filename else ""
    if (
        (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT))
        or "No space left on device" in str(e)
        or "(os error 28)" in str(e)
    ):
        return (
            f"no space left on the device{where} ({type(e).__name__}: {text}) (valid: free space there, or another "
            "output path; no file was left half-written)"
        )
    # torch's PytorchStreamWriter: a full disk most often, the cause is not kept ("unexpected pos": a short
    # write found when the archive is closed)
    if "file write failed" in str(e) or ("inline_container" in str(e) and "unexpected pos" in str(e)):
        return (
            f"a file could not be written ({type(e).__name__}: {text}) (valid: check the free space and permissions "
            "of the output path; no file was left half-written)"
        )
    if isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"the file system refused{where}: {e.strerror} (valid: a path this user may write; an immutable "
            "(chattr +i) file or a read-only mount cannot be written or replaced)"
        )
    return None


def entry() -> None:
    from ..console import keep_running_without_reader

    keep_running_without_reader()  # `nexus train | head -2` trains on and saves; its output goes nowhere
    try:
        code = main()
        sys.stdout.flush()  # here, not at interpreter exit, so a closed pipe is caught below
    except BrokenPipeError:
        # The reader went away (`nexus config | head`): what it wanted was printed. Point stdout at
        # /dev/null so the interpreter's final flush raises nothing, and exit as `head`'s writers do.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)
