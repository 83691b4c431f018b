"""The lm-evaluation-harness adapter: its log-likelihoods equal a direct computation from the model's
logits; it runs a tiny local multiple-choice task offline; unknown tasks fail with exit code 2."""
from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

import lm_eval  # noqa: F401,E402  -- a dev dependency: without it these tests must fail, never skip

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
    full = (ctx_ids + cont_ids)[-(model.cfg.max_seq_len + 1):]
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
    cases = [("The cat sat on the", " mat"), ("x", "yz"), ("", "hello"),
             ("a long context that is longer than the thirty-two token window", " end"),
             ("trailing space ", "moves")]
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
        piece = ids[start:start + n]
        ctx = ids[max(0, start + len(piece) - n - 1):start]
        want_long += direct_loglikelihood(model, ctx, piece)[0]
        start += n
    assert got_long == pytest.approx(want_long, abs=1e-3)


def test_generate_until_is_greedy_and_stops(model):
    tok = ByteTokenizer()
    lm = NexusLM(model, tok)
    ctx = "hello"
    ids = torch.tensor([tok.encode(ctx)])
    ref = tok.decode(model.generate(ids, max_new_tokens=8, temperature=0.0, eos_id=tok.eos_id)[0, ids.shape[1]:].tolist())
    (free,) = lm.generate_until([_req("generate_until", ctx, {"until": [], "max_gen_toks": 8})])
    assert free == ref
    if len(ref) > 2:
        stop = ref[2]
        (cut,) = lm.generate_until([_req("generate_until", ctx, {"until": [stop], "max_gen_toks": 8})])
        assert cut == ref[:ref.index(stop)]


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


def test_cli_eval_lm_eval_local_task_and_bad_task(tmp_path, capsys, model):
    from nexus.checkpoint import save_checkpoint

    cfg = get_preset("baseline-micro")
    cfg.model, cfg.data.seq_len = model.cfg, model.cfg.max_seq_len
    ck = save_checkpoint(tmp_path / "ck", model, cfg, ByteTokenizer())
    write_tiny_mc_task(tmp_path)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):  # lm-eval's logging set-up swaps pytest's captured stream
        rc = main(["eval", "--checkpoint", str(ck), "--lm-eval", "nexus_tiny_mc", "--lm-eval-include", str(tmp_path),
                   "--json"])
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
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", functools.partial(lm_eval.tasks.TaskManager, include_defaults=False))
    out = tmp_path / "out"
    argv = ["lm_eval", "--model", "nexus", "--model_args", f"checkpoint={ck}", "--tasks", "nexus_tiny_mc",
            "--include_path", str(tmp_path), "--output_path", str(out), "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", argv)
    cli = HarnessCLI()
    with contextlib.redirect_stdout(io.StringIO()):
        cli.execute(cli.parse_args())
    assert _results(out) == pytest.approx(expected)


def test_model_args_without_checkpoint_is_a_clear_error():
    from nexus.config import ConfigError

    with pytest.raises(ConfigError, match="checkpoint=DIR"):
        NexusLM.create_from_arg_string("pretrained=gpt2")


@pytest.mark.slow
def test_nexus_lm_eval_script_runs_lm_evals_cli(tmp_path, model):
    import os
    import subprocess
    import sys

    ck, expected = _checkpoint_and_task(tmp_path, model)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "nexus.eval.lm_eval_cli", "run", "--model", "nexus", "--model_args",
                           f"checkpoint={ck}", "--tasks", "nexus_tiny_mc", "--include_path", str(tmp_path),
                           "--output_path", str(out)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, HF_DATASETS_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _results(out) == pytest.approx(expected)
