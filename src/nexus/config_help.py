"""Every config field with its default and its one-line reason, for `nexus config` and `--help`.

The reason is the field's `option(default, reason)` (a registered kind's options), or the comment beside
the field in config.py (the project rule: one line per field), read from the source with `tokenize`, so
the listing can never drift from the code that defines it.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import tokenize
import typing
from functools import cache

from .config import RunConfig
from .config_base import KindOptions, declared_choices


@cache
def field_reasons(cls) -> dict[str, str]:
    """{field name: its reason} for a config dataclass: a field declared with `config.option(default,
    reason)` carries it (a kind's options, inherited fields included), else the comment on its line."""
    declared = {f.name: f.metadata["reason"] for f in dataclasses.fields(cls) if "reason" in f.metadata}
    for f in dataclasses.fields(cls):  # a `choice` setting: the values its owner declares, listed beside it
        if "declared_in" in f.metadata:
            values = declared_choices(f.metadata["setting"], f.metadata["declared_in"])
            declared[f.name] += f" (valid: {'|'.join(values)})"
    return {**_comment_reasons(cls), **declared}


def _comment_reasons(cls) -> dict[str, str]:
    src = inspect.getsource(cls)
    # the comments inside each statement, joined, keyed by the statement's first line: a field the formatter wrapped
    # over several lines keeps its reason wherever the comment landed in it, and a reason longer than a line
    # continues on comment lines inside the statement's parentheses
    comments: dict[int, str] = {}
    start = None
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.NEWLINE:
            start = None
        elif start is None and tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            start = tok.start[0]
        if tok.type == tokenize.COMMENT and start is not None:
            text = tok.string.lstrip("#").strip()
            comments[start] = f"{comments[start]} {text}" if start in comments else text
    out = {}
    names = {f.name for f in dataclasses.fields(cls)}
    for i, line in enumerate(src.splitlines(), start=1):
        stripped = line.strip()
        name = stripped.split(":", 1)[0].strip()
        if line.startswith("    ") and not line.startswith("     ") and name in names and ":" in stripped:
            out[name] = comments.get(i, "")
    return out


def rows(cfg, prefix: str = "") -> list[tuple[str, object, str]]:
    """(dotted name, value, reason) for every leaf field of `cfg`, sections first-to-last."""
    out = []
    reasons = field_reasons(type(cfg))
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        if f.metadata.get("set_by_growth"):  # state only growth writes (model.growth_state): not a setting
            continue
        v = getattr(cfg, f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            out += rows(v, f"{prefix}{f.name}.")
        elif f.name == "kind" and isinstance(cfg, KindOptions):  # the kinds registered now, plugins' included
            out.append((prefix + f.name, v, f"{reasons.get(f.name, '')} (valid: {'|'.join(type(cfg).kinds())})"))
        else:
            out.append((prefix + f.name, v, reasons.get(f.name, "")))
    return out


def format_fields(cfg: RunConfig | None = None, section: str = "") -> str:
    """One line per field: `name = default  # reason`, filtered to names starting with `section`."""
    cfg = cfg if cfg is not None else RunConfig()
    items = [r for r in rows(cfg) if r[0].startswith(section)]
    width = max((len(f"{n} = {v!r}") for n, v, _ in items), default=0)
    return "\n".join(f"{f'{n} = {v!r}':<{width}}  # {why}" for n, v, why in items)
