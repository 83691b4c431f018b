"""Issue 48's proof that depth growth is a growth family added as one new file (tests/test_extension_by_new_files.py's
method): a copy of src/nexus without growth/depth.py gets that file back and nothing else, and a fresh interpreter
on the copy lists its flags in `nexus grow --help`, grows a trained checkpoint with `--depth.layers` (logits
unchanged), grows width and depth in one call, and lists the depth methods of the progressive experiment; every
file the copy had before, the width family's included, is byte-identical afterwards.

Run by pytest, this module makes the copy and starts the interpreter; run as a script (`python
tests/test_depth_by_new_files.py WORK`, the copy on PYTHONPATH) it is that interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "src" / "nexus"
FAMILY = "growth/depth.py"
WIDTH_FAMILY = [
    "growth/width.py",
    "growth/spec.py",
    "growth/generic_grow.py",
    "growth/optimizer_surgery.py",
    "growth/rewarmup.py",
    "growth/verification.py",
    "growth/registry.py",
    "growth/hook.py",
]


def test_depth_growth_is_one_new_file_and_edits_nothing(tmp_path):
    from test_extension_by_new_files import snapshot

    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "nexus", ignore=shutil.ignore_patterns("__pycache__"))
    text = (src / "nexus" / FAMILY).read_bytes()
    (src / "nexus" / FAMILY).unlink()
    before = snapshot(src / "nexus")
    assert all(rel in before for rel in WIDTH_FAMILY)
    (src / "nexus" / FAMILY).write_bytes(text)
    env = {
        **os.environ,
        "PYTHONPATH": f"{src}{os.pathsep}{TESTS}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "NEXUS_DISABLE_PLUGINS": "1",
    }
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, __file__, str(work)], env=env, cwd=work, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert proc.stdout.splitlines()[-1] == "checked depth", proc.stdout[-2000:]
    after = snapshot(src / "nexus")
    assert {rel: after[rel] for rel in before} == before  # 0 edits to the files nexus had, width's included
    assert set(after) == set(before) | {FAMILY}


def main(work: Path) -> None:
    import torch
    from test_extension_by_new_files import MICRO, cli, train

    import nexus

    assert Path(nexus.__file__).resolve().parent == Path(os.environ["PYTHONPATH"].split(os.pathsep)[0], "nexus")
    from nexus.checkpoint import load_checkpoint

    help_text = " ".join(cli("grow", "--help").split())
    assert "growth: depth (Depth: new blocks" in help_text and "--depth.layers N new layer count" in help_text
    ckpt = train(work / "run", *MICRO)
    ids = torch.randint(0, 259, (2, 24), generator=torch.Generator().manual_seed(0))
    old = load_checkpoint(ckpt)[0].eval()
    for name, growth in [
        ("deep", ["--depth.layers", "4"]),
        ("both", ["--depth.layers", "4", "--width.ffn", "128", "--init", "random,zero", "--preserve", "exact"]),
    ]:
        report = json.loads(cli("grow", "--checkpoint", str(ckpt), "--out", str(work / name), "--json", *growth))
        new, cfg, _ = load_checkpoint(work / name)
        assert cfg.model.n_layers == 4 and cfg.growth_history[-1]["family"] == "depth"
        with torch.no_grad():
            torch.testing.assert_close(new.eval()(ids).logits, old(ids).logits, rtol=1e-5, atol=1e-5)
        assert report["verify"]["max_abs_dlogits"] <= 1e-5 and not report["verify"]["dead_blocks"]
    assert cfg.model.ffn == 128
    listing = cli("experiment", "progressive", "--list")
    assert all(m in listing for m in ("gstack", "depth-zero", "width-depth")), listing
    print("checked depth")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
