"""benchmarks/studies/progressive_paper_regime.py: its shrunk shapes are the regime it claims (>= 100 tokens
per active parameter before growth, 2x growth, *-matched bases equal in parameters), and its run
cache shares only runs whose whole configuration is identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("studies/progressive_paper_regime.py")


@pytest.fixture
def plans(bench, tmp_path):
    shrunk = bench.regime_methods(list(bench.REGIME))
    return {name: bench.plan_method(m, bench.TOKENS_PER_PARAM, [0], tmp_path / "out") for name, m in shrunk.items()}


def test_every_method_grows_after_100_tokens_per_active_parameter(plans):
    for name, (plan, counts) in plans.items():
        n = counts["small"]["active"]
        assert plan["grow_at_tokens"] >= 100 * n, name
        assert plan["grow_at_tokens"] < 100 * n + plan["tokens_per_step"], name  # rounded up by less than a step
        assert counts["small"]["active_non_embedding"] < n


def test_shrunk_shapes_are_2x_and_the_matched_bases_are_equal_in_size(plans):
    d, vocab = 16, 259
    emb = vocab * d
    # one layer of the 16-wide transformer: q,k,v,o (d x d each) + SwiGLU FFN 3 x d x 32 + 2 RMSNorm weights
    layer = lambda proj: 3 * proj + d * d + 3 * d * 32 + 2 * d  # noqa: E731
    base = emb + 2 * layer(d * d) + d  # + final norm; the head is tied
    assert plans["sparkling"][1]["small"]["active"] == base
    assert plans["sparkling"][1]["small"]["active_non_embedding"] == base - emb
    # Nexus-Rank per projection d*M + M*A + A*d, TokenFormer 2*n*d (Nexusformer Sec. 3, TokenFormer Sec. 3)
    nr = lambda m, a: d * m + m * a + a * d  # noqa: E731
    tf = lambda n: 2 * n * d  # noqa: E731
    assert nr(24, 32) == tf(52) and nr(48, 64) == tf(152)
    for name, per_proj in (("nexus-rank-matched", nr(24, 32)), ("tokenformer-matched", tf(52))):
        assert plans[name][1]["small"]["active"] == emb + 2 * layer(per_proj) + d, name
    big = {name: plans[name][0]["total_params"]["large"] for name in ("nexus-rank-matched", "tokenformer-matched")}
    assert big["nexus-rank-matched"] == big["tokenformer-matched"] == emb + 2 * layer(nr(48, 64)) + d
    wide = plans["sparkling"][0]["total_params"]["large"]
    # d 16 -> 32, FFN 32 -> 64; attention keeps its 2 heads of 8 (q,k,v: 32 -> 16, o: 16 -> 32), as SPARKLING's
    # "hidden 2x" keeps its heads
    assert wide == vocab * 32 + 2 * (4 * 32 * 16 + 3 * 32 * 64 + 2 * 32) + 32


def _finished(run_dir: Path, cfg: dict) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "done.json").write_text(json.dumps({"val_loss": 1.0}))
    (run_dir / "config.yaml").write_text(f"train:\n  out_dir: {cfg['train']['out_dir']}\n")


def test_run_cache_copies_only_identical_configurations(bench, tmp_path):
    cfg = {"model": {"d_model": 16}, "train": {"seed": 0, "lr": 3e-3, "out_dir": str(tmp_path / "a/seed0/small")}}
    _finished(tmp_path / "a/seed0/small", cfg)
    cache = bench.RunCache()
    cache.record({"0": {"small": cfg}}, tmp_path / "a")
    same = {**cfg, "train": {**cfg["train"], "out_dir": str(tmp_path / "b/seed0/small")}}
    other_seed = {**cfg, "train": {**cfg["train"], "seed": 1, "out_dir": str(tmp_path / "b/seed1/small")}}
    other_lr = {**cfg, "train": {**cfg["train"], "lr": 1e-3, "out_dir": str(tmp_path / "b/seed0/scratch")}}
    n = cache.fill({"0": {"small": same, "scratch": other_lr}, "1": {"small": other_seed}}, tmp_path / "b")
    assert n == 1
    assert (tmp_path / "b/seed0/small/done.json").is_file()
    assert str(tmp_path / "b/seed0/small") in (tmp_path / "b/seed0/small/config.yaml").read_text()
    assert not (tmp_path / "b/seed1/small").exists() and not (tmp_path / "b/seed0/scratch").exists()
