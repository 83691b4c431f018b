"""The import graph of `nexus` has no circles and no upward arrows (issue 16 item 7; docs/architecture.md).

The graph is read from the source with `ast`, not by importing: every `import` / `from ... import`
counts, including the ones inside functions (a lazy import is still a dependency), relative imports
are resolved against the importing module's package, and a package's `__init__` is a module of its
own (`nexus.growth`). `from pkg import name` points at `pkg.name` when that is a module, else at `pkg`.
Dynamic imports (`nexus.plugins.import_submodules`, `importlib`) are not arrows: that is how plugins
register themselves without their registry importing them.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import nexus

SRC = Path(nexus.__file__).resolve().parent

# Packages from the bottom up. A module may import from its own package or from a lower tier, never
# from its own tier's other packages or from above. docs/architecture.md draws the same order.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),  # ConfigError: below everything, so the registry and the schema need not import each other
    ("plugins",),  # the registries (they find the kinds and plugins by name)
    ("config_base",),  # how config dataclasses are declared (option, choice, KindOptions), checked and parsed
    ("config",),  # the schema: dataclasses and their validation
    ("config_migration", "config_help", "console", "cpu_info", "kind_options", "lifeline", "outdir", "runtime"),
    ("config_overrides", "atomic"),
    ("presets",),  # a preset file that names its base is merged onto it (config_overrides.merge_mapping)
    (
        "models",
        "optim",
        "figures",
    ),  # layers, architectures, generation, parameter accounting |
    # optimizers, LR schedule | matplotlib defaults, saved through atomic
    ("data",),  # tokenizers (incl. the HF wrapper), corpora, batches
    ("checkpoint",),
    ("eval", "hf", "export"),  # read checkpoints + tokenizers: evaluation, HF conversion, ternary export
    ("train",),
    ("growth",),
    ("analysis",),
    ("experiments",),
    ("cli",),
    ("nexus", "__main__"),  # the package root (`nexus.load`, ...) and `python -m nexus`
)

# Upward arrows that are known and scheduled to go. Each must still exist (a stale entry fails).
# (None today: growth plugs into the trainer through its hook API, issue 16 item 4.)
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def module_graph(root: Path) -> dict[str, set[str]]:
    """{module: modules of the same top package it imports}, for every .py file under `root`."""
    mods: dict[str, tuple[Path, list[str]]] = {}
    for f in sorted(root.rglob("*.py")):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            pkg = parts
        else:
            pkg = parts[:-1]
        mods[".".join(parts)] = (f, pkg)
    top = root.name
    edges: dict[str, set[str]] = {}
    for name, (f, pkg) in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg[: len(pkg) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target != top and not target.startswith(top + "."):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    deps.add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name == top or a.name.startswith(top + "."))
        edges[name] = {d for d in deps if d in mods and d != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_arrows(edges: dict[str, set[str]], layers) -> list[str]:
    tier = {pkg: i for i, names in enumerate(layers) for pkg in names}
    bad = []
    for a, deps in sorted(edges.items()):
        for b in sorted(deps):
            pa, pb = package_of(a), package_of(b)
            if pa != pb and tier[pa] <= tier[pb] and (a, b) not in ALLOWED_UPWARD:
                bad.append(f"{a} ({pa}, tier {tier[pa]}) -> {b} ({pb}, tier {tier[pb]})")
    return bad


def test_no_import_circles_in_nexus():
    assert cycles(module_graph(SRC)) == []


def test_every_package_has_a_layer():
    listed = [p for names in LAYERS for p in names]
    assert len(listed) == len(set(listed))
    found = {package_of(m) for m in module_graph(SRC)}
    assert found - set(listed) == set(), "place the new package in LAYERS (and docs/architecture.md)"


def test_imports_only_point_down_the_layers():
    assert upward_arrows(module_graph(SRC), LAYERS) == []


def test_known_exceptions_still_exist():
    edges = module_graph(SRC)
    assert [e for e in ALLOWED_UPWARD if e[1] not in edges.get(e[0], set())] == [], (
        "an allowed upward arrow is gone: delete it from ALLOWED_UPWARD"
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_checker_finds_circles_through_lazy_relative_and_init_imports(tmp_path):
    """The checker itself can fail: a planted circle through a function-level relative import and a
    package __init__, a planted `from pkg import submodule`, and an absolute upward import."""
    _write(
        tmp_path,
        {
            "nexus/__init__.py": "",
            "nexus/config.py": "",
            "nexus/models/__init__.py": "from .attention import Attention\n",
            "nexus/models/attention.py": """\
            def build():
                from .. import models  # lazy, relative, to the package __init__
                from . import higher
            """,
            "nexus/models/higher.py": "from ..config import X\n",
            "nexus/data/__init__.py": "",
            "nexus/data/loader.py": "import nexus.models.higher\nfrom nexus.data import tok\n",
            "nexus/data/tok.py": "",
        },
    )
    edges = module_graph(tmp_path / "nexus")
    assert edges["nexus.models.attention"] == {"nexus.models", "nexus.models.higher"}
    assert edges["nexus.models.higher"] == {"nexus.config"}
    assert edges["nexus.data.loader"] == {"nexus.models.higher", "nexus.data.tok"}
    assert cycles(edges) == [["nexus.models", "nexus.models.attention"]]
    assert upward_arrows(edges, (("config",), ("models",), ("data",), ("nexus",))) == []
    assert upward_arrows(edges, (("config",), ("data",), ("models",), ("nexus",))) == [
        "nexus.data.loader (data, tier 1) -> nexus.models.higher (models, tier 2)"
    ]


def literal_dynamic_imports(root: Path) -> dict[str, set[str]]:
    """{module: the nexus modules it imports by a literal name (`importlib.import_module("nexus.x")`)}."""
    top, out = root.name, {}
    for f in sorted(root.rglob("*.py")):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and node.args[0].value.startswith(top + ".")
            ):
                out.setdefault(name, set()).add(node.args[0].value)
    return out


def test_no_circle_hides_behind_an_import_by_literal_name():
    """A literal `importlib.import_module("nexus.plugins")` is an import written another way (how config.py
    reached plugins.py while plugins.py imported ConfigError from it: issue 37): counted as an arrow, the
    graph still has no circle. A registry's package named by a variable is how plugins register, not this."""
    edges = module_graph(SRC)
    for mod, targets in literal_dynamic_imports(SRC).items():
        edges[mod] = edges[mod] | {t for t in targets if t in edges}
    assert cycles(edges) == []


def test_the_literal_import_check_can_fail(tmp_path):
    _write(
        tmp_path,
        {
            "nexus/__init__.py": "",
            "nexus/config.py": "import importlib\ndef kinds():\n    return importlib.import_module('nexus.plugins')\n",
            "nexus/plugins.py": "from .config import kinds\n",
        },
    )
    root = tmp_path / "nexus"
    assert literal_dynamic_imports(root) == {"nexus.config": {"nexus.plugins"}}
    edges = module_graph(root)
    assert cycles(edges) == []  # invisible to the static graph
    edges["nexus.config"] |= literal_dynamic_imports(root)["nexus.config"]
    assert cycles(edges) == [["nexus.config", "nexus.plugins"]]
