"""The lm-evaluation-harness adapter: its log-likelihoods equal a direct computation from the model's
logits; it runs a tiny local multiple-choice task offline; unknown tasks fail with exit code 2."""

from __future__ import annotations

import contextlib
import io
import json

import lm_eval  # noqa: F401,E402  -- a dev dependency: without it these tests must fail, never skip
import pytest
import torch
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval_helpers import write_tiny_mc_task  # noqa: E402

from nexus.cli import main  # noqa: E402
from nexus.data.tokenizer import ByteTokenizer  # noqa: E402
from nexus.eval.lm_eval_adapter import NexusLM, evaluate_tasks  # noqa: E402
from nexus.models import build_model  # noqa: E402
from nexus.presets import get_preset  # noqa: E402


@pytest.fixture(scope="module")
def model():
    cfg = get_preset("baseline-micro").model
    cfg.max_seq_len = 32  # short context so truncation is exercised
    torch.manual_seed(0)
    return build_model(cfg).eval()


def _req(kind, *args):
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


def direct_loglikelihood(model, ctx_ids, cont_ids):
    """Obviously-correct reference: one unbatched forward, sum of log-softmax at the continuation."""
    full = (ctx_ids + cont_ids)[-(model.cfg.max_seq_len + 1) :]
    with torch.no_grad():
        logits = model(torch.tensor([full[:-1]])).logits[0]
    logp = torch.log_softmax(logits.double(), -1)
    n = len(cont_ids)
    total, greedy = 0.0, True
    for j in range(len(full) - n, len(full)):
        total += float(logp[j - 1, full[j]])
        greedy &= int(logp[j - 1].argmax()) == full[j]
    return total, greedy


def test_loglikelihood_equals_direct_computation(model):
    tok = ByteTokenizer()
    lm = NexusLM(model, tok, batch_size=3)
    cases = [
        ("The cat sat on the", " mat"),
        ("x", "yz"),
        ("", "hello"),
        ("a long context that is longer than the thirty-two token window", " end"),
        ("trailing space ", "moves"),
    ]
    got = lm.loglikelihood([_req("loglikelihood", c, t) for c, t in cases])
    for (ctx, cont), (ll, greedy) in zip(cases, got):
        if ctx.endswith(" "):  # lm-eval's convention: the space belongs to the continuation
            ctx, cont = ctx[:-1], " " + cont
        ctx_ids = tok.encode(ctx) if ctx else [tok.bos_id]
        want, want_greedy = direct_loglikelihood(model, ctx_ids, tok.encode(cont))
        assert ll == pytest.approx(want, abs=1e-4)
        assert greedy == want_greedy
    # batching and padding change nothing
    one = NexusLM(model, tok, batch_size=1).loglikelihood([_req("loglikelihood", c, t) for c, t in cases])
    assert [a for a, _ in one] == pytest.approx([a for a, _ in got], abs=1e-4)


def test_rolling_loglikelihood_equals_sum_over_tokens(model):
    tok = ByteTokenizer()
    lm = NexusLM(model, tok)
    short = "abc def"
    (got,) = lm.loglikelihood_rolling([_req("loglikelihood_rolling", short)])
    want, _ = direct_loglikelihood(model, [tok.bos_id], tok.encode(short))
    assert got == pytest.approx(want, abs=1e-4)
    # longer than the window: disjoint windows, each token scored exactly once
    long = "0123456789" * 7
    (got_long,) = lm.loglikelihood_rolling([_req("loglikelihood_rolling", long)])
    ids, n = tok.encode(long), model.cfg.max_seq_len
    want_long, _ = direct_loglikelihood(model, [tok.bos_id], ids[:n])
    start = n
    while start < len(ids):  # each later window: up to n tokens of left context, score only the new ones
        piece = ids[start : start + n]
        ctx = ids[max(0, start + len(piece) - n - 1) : start]
        want_long += direct_loglikelihood(model, ctx, piece)[0]
        start += n
    assert got_long == pytest.approx(want_long, abs=1e-3)


def test_generate_until_is_greedy_and_stops(model):
    tok = ByteTokenizer()
    lm = NexusLM(model, tok)
    ctx = "hello"
    ids = torch.tensor([tok.encode(ctx)])
    ref = tok.decode(
        model.generate(ids, max_new_tokens=8, temperature=0.0, eos_id=tok.eos_id)[0, ids.shape[1] :].tolist()
    )
    (free,) = lm.generate_until([_req("generate_until", ctx, {"until": [], "max_gen_toks": 8})])
    assert free == ref
    if len(ref) > 2:
        stop = ref[2]
        (cut,) = lm.generate_until([_req("generate_until", ctx, {"until": [stop], "max_gen_toks": 8})])
        assert cut == ref[: ref.index(stop)]


def test_local_multiple_choice_task_offline_matches_own_scoring(tmp_path, model):
    tok = ByteTokenizer()
    rows = write_tiny_mc_task(tmp_path)
    lm = NexusLM(model, tok)
    res = evaluate_tasks(lm, ["nexus_tiny_mc"], include_path=str(tmp_path))
    correct = 0
    for r in rows:  # lm-eval joins context and choice with target_delimiter " " (choices here start with a space)
        scores = [direct_loglikelihood(model, tok.encode(r["question"]), tok.encode(" " + c))[0] for c in r["choices"]]
        correct += int(max(range(len(scores)), key=scores.__getitem__) == r["answer"])
    assert res["nexus_tiny_mc"]["acc"] == pytest.approx(correct / len(rows))


@pytest.mark.slow  # lm-eval task loading through the CLI (~16 s); the adapter's tests stay; run with -m slow
def test_cli_eval_lm_eval_local_task_and_bad_task(tmp_path, capsys, model):
    from nexus.checkpoint import save_checkpoint

    cfg = get_preset("baseline-micro")
    cfg.model, cfg.data.seq_len = model.cfg, model.cfg.max_seq_len
    ck = save_checkpoint(tmp_path / "ck", model, cfg, ByteTokenizer())
    write_tiny_mc_task(tmp_path)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):  # lm-eval's logging set-up swaps pytest's captured stream
        rc = main(
            [
                "eval",
                "--checkpoint",
                str(ck),
                "--lm-eval",
                "nexus_tiny_mc",
                "--lm-eval-include",
                str(tmp_path),
                "--json",
            ]
        )
    out = buf.getvalue().strip().splitlines()[-1]
    assert rc == 0 and 0.0 <= json.loads(out)["nexus_tiny_mc"]["acc"] <= 1.0
    capsys.readouterr()  # drop the first run's progress bars
    rc = main(["eval", "--checkpoint", str(ck), "--lm-eval", "no_such_task_xyz", "--lm-eval-include", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "no_such_task_xyz" in err[0] and "not found" in err[0]


# ----------------------------------------------------------------------------- lm-eval's own command line
def _checkpoint_and_task(tmp_path, model):
    from nexus.checkpoint import save_checkpoint

    cfg = get_preset("baseline-micro")
    cfg.model, cfg.data.seq_len = model.cfg, model.cfg.max_seq_len
    ck = save_checkpoint(tmp_path / "ck", model, cfg, ByteTokenizer())
    rows = write_tiny_mc_task(tmp_path)
    tok = ByteTokenizer()
    correct = 0
    for r in rows:
        scores = [direct_loglikelihood(model, tok.encode(r["question"]), tok.encode(" " + c))[0] for c in r["choices"]]
        correct += int(max(range(len(scores)), key=scores.__getitem__) == r["answer"])
    return ck, correct / len(rows)


def _results(out_dir):
    (f,) = list(out_dir.rglob("results_*.json"))
    return json.loads(f.read_text())["results"]["nexus_tiny_mc"]["acc,none"]


def test_nexus_is_registered_in_lm_evals_model_registry():
    from lm_eval.api.registry import get_model

    assert get_model("nexus") is NexusLM
    from lm_eval.api.registry import model_registry

    assert "hf" in model_registry and "dummy" in model_registry  # registering ours did not hide lm-eval's models


def test_lm_evals_cli_runs_model_nexus_in_process(tmp_path, model, monkeypatch):
    """`lm_eval run --model nexus --model_args checkpoint=DIR` parsed and run by lm-eval's own CLI.
    lm-eval's ~15k bundled task YAMLs are not indexed here (tens of seconds); the slow test below runs
    the unpatched CLI as a subprocess."""
    import functools
    import sys

    import lm_eval.tasks
    from lm_eval._cli import HarnessCLI

    ck, expected = _checkpoint_and_task(tmp_path, model)
    monkeypatch.setattr(
        lm_eval.tasks, "TaskManager", functools.partial(lm_eval.tasks.TaskManager, include_defaults=False)
    )
    out = tmp_path / "out"
    argv = [
        "lm_eval",
        "--model",
        "nexus",
        "--model_args",
        f"checkpoint={ck}",
        "--tasks",
        "nexus_tiny_mc",
        "--include_path",
        str(tmp_path),
        "--output_path",
        str(out),
        "--device",
        "cpu",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    cli = HarnessCLI()
    with contextlib.redirect_stdout(io.StringIO()):
        cli.execute(cli.parse_args())
    assert _results(out) == pytest.approx(expected)


def test_model_args_without_checkpoint_is_a_clear_error():
    from nexus.config import ConfigError

    with pytest.raises(ConfigError, match="checkpoint=DIR"):
        NexusLM.create_from_arg_string("pretrained=gpt2")


# ----------------------------------------------------------------------------- the bare `lm_eval` command
# lm-eval 0.4.13 has no plugin discovery: `lm_eval --model nexus` works because nexus-lm-eval.pth (put
# into site-packages by setup.py, for wheel and editable installs alike) installs a lazy registration
# hook at interpreter start (src/_nexus_lm_eval_hook.py).
PTH = "nexus-lm-eval.pth"


def _installed_pth():
    """The .pth of the installed nexus; a missing one fails here, naming the fix, instead of as lm-eval's
    "no model for this name found" further down."""
    from importlib import metadata

    try:
        dist = metadata.distribution("nexus")
    except metadata.PackageNotFoundError:
        pytest.fail(
            "nexus is not pip-installed in this interpreter (valid: pip install -e '.[dev]'), so "
            f"{PTH} cannot be in site-packages and `lm_eval --model nexus` cannot find the model"
        )
    pth = dist.locate_file(PTH)
    assert pth.is_file(), (
        f"{PTH} is missing from {dist.locate_file('')} although nexus is installed there: "
        "setup.py's build_py step did not ship it, so `lm_eval --model nexus` cannot work"
    )
    return pth


def _run(argv, **kw):
    import os
    import subprocess

    return subprocess.run(
        argv, capture_output=True, text=True, timeout=600, env=dict(os.environ, HF_DATASETS_OFFLINE="1"), **kw
    )


def _bin(name):
    import sys
    from pathlib import Path

    return str(Path(sys.executable).parent / name)


def test_pth_hook_imports_nothing_until_lm_eval_registry_is_imported(tmp_path):
    import sys

    _installed_pth()
    probe = (
        "import sys; heavy = lambda: sorted(m for m in ('torch', 'nexus', 'lm_eval') if m in sys.modules); "
        "print(heavy(), '_nexus_lm_eval_hook' in sys.modules); "
        "import lm_eval.api.registry as r; print(heavy(), r.model_registry._objs['nexus'], 'hf' in r.model_registry); "
        "print(r.get_model('nexus').__name__, 'torch' in sys.modules)"
    )
    proc = _run([sys.executable, "-c", probe], cwd=tmp_path)  # outside the repo: only site-packages can bring the hook
    assert proc.returncode == 0, proc.stderr[-3000:]
    start, registered, loaded = proc.stdout.strip().splitlines()
    assert start == "[] True"  # the hook is loaded at start (so the check is not vacuous) and imported nothing heavy
    assert (
        registered == "['lm_eval'] nexus.eval.lm_eval_adapter:NexusLM True"
    )  # a lazy string; lm-eval's own models kept
    assert loaded == "NexusLM True"


def test_pth_line_is_silent_when_its_module_is_gone(tmp_path):
    """A half-uninstalled nexus (the .pth left, the hook module gone) must not print at every start."""
    import shutil
    import sys

    site_dir = tmp_path / "site"
    site_dir.mkdir()
    shutil.copy(_installed_pth(), site_dir / PTH)
    # -S: no site-packages, -E: no PYTHONPATH (a checkout's src/ holds the hook too), so _nexus_lm_eval_hook
    # cannot be imported when the copy is processed
    code = f"import sys, site; site.addsitedir({str(site_dir)!r}); print('_nexus_lm_eval_hook' in sys.modules)"
    proc = _run([sys.executable, "-S", "-E", "-c", code], cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "False\n", "")


def _lm_eval_cli_run(tmp_path, model, argv):
    ck, expected = _checkpoint_and_task(tmp_path, model)
    out = tmp_path / "out"
    proc = _run(
        argv
        + [
            "--model",
            "nexus",
            "--model_args",
            f"checkpoint={ck}",
            "--tasks",
            "nexus_tiny_mc",
            "--include_path",
            str(tmp_path),
            "--output_path",
            str(out),
            "--device",
            "cpu",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _results(out) == pytest.approx(expected)
    assert "nexus_tiny_mc" in proc.stdout  # lm-eval's own results table


@pytest.mark.slow  # the lm_eval console command in a subprocess (~30 s); the adapter's tests stay; run with -m slow
def test_bare_lm_eval_command_runs_model_nexus(tmp_path, model):
    """lm-evaluation-harness's unmodified console script, as a user types it (~12 s: lm-eval indexes its
    bundled task YAMLs)."""
    _installed_pth()
    _lm_eval_cli_run(tmp_path, model, [_bin("lm_eval")])


@pytest.mark.slow
@pytest.mark.parametrize("form", ["python -m lm_eval", "nexus-lm-eval run"])
def test_other_lm_eval_command_forms_run_model_nexus(tmp_path, model, form):
    import sys

    _installed_pth()
    argv = [sys.executable, "-m", "lm_eval"] if form == "python -m lm_eval" else [_bin("nexus-lm-eval"), "run"]
    _lm_eval_cli_run(tmp_path, model, argv)


def test_a_failing_registration_leaves_lm_eval_importable(tmp_path):
    """If registering "nexus" raises, lm-eval's registry still imports (its own models stay usable) and a
    warning names the cause; only `--model nexus` goes missing."""
    import sys

    _installed_pth()
    probe = (
        "import warnings, _nexus_lm_eval_hook as h\n"
        "def broken(module): raise KeyError('planted')\n"
        "h.register_nexus = broken\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import lm_eval.api.registry as r\n"
        "print(r.__name__, 'nexus' in r.model_registry)\n"
        "print([str(w.message)[:40] for w in caught if 'planted' in str(w.message)])\n"
    )
    proc = _run([sys.executable, "-c", probe], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = proc.stdout.strip().splitlines()
    assert first == "lm_eval.api.registry False"  # the import went through; only nexus is missing
    assert "nexus could not register with lm-eval" in second
