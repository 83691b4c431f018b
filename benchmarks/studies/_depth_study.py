"""Issue 48 item 6's study `depth-vs-width`, planned (`--estimate`; running it is for a later session): depth growth
against SPARKLING's width growth at matched final parameters. Data for benchmarks/studies/regime_study.py
(`--study depth-vs-width`).

  arms       `sparkling`: 4 layers, d 64, FFN 128 -> FFN 256 (copy + RMS rescale, asymmetric state, re-warmup);
             `depth-zero-matched`: 2 layers, d 64, FFN 256 -> 4 layers, new blocks interleaved with their output
             projections zero (LLaMA-Pro's function-preserving insertion), asymmetric state, the same re-warmup.
             Both end as 4 layers x d 64 x FFN 256, so they share one scratch model: matched final parameters exactly.
  regime     each grows after 20 tokens per active parameter of its own small model (the depth arm's small model is
             smaller, so it grows earlier), as many steps after growth as before; 16 x 128 tokens per step; stdlib.
  tuning     each small shape and the shared scratch shape, 3 lrs a factor 2 apart on tuning seeds 100 and 101.
  evaluation seeds 0-4: per arm prefix, small, grown; scratch once per seed. The comparison: depth-grown minus
             width-grown at equal final shape (paired by seed), and each one's grown - scratch.
"""

from __future__ import annotations

from nexus.experiments.study_parts import Arms, LrGrid

STUDY = "depth-vs-width"
SCALE = "credible"
TUNING_SEEDS = (100, 101)
EVAL_SEEDS = (0, 1, 2, 3, 4)
ARMS = ("sparkling", "depth-zero-matched")
TUNE_LRS = (8e-3, 4e-3, 1.6e-2)  # around sparkling-credible's tuned 8e-3
PARTS = ("tune", "eval")
NEEDS = {"eval": "tune"}


def depth_methods() -> dict:
    """The depth arm at sparkling's final shape: the library's depth-zero grown from a 2-layer d-64 FFN-256 model with
    SPARKLING's recipe (wd 0.1 on every parameter, per-head QK-norm) and its re-warmup."""
    from nexus.experiments import progressive as P

    sparkling = P.methods()["sparkling"]
    small = {**sparkling.overrides, "model.n_layers": 2, "model.ffn_hidden": 256}
    return {
        "depth-zero-matched": P.method_variant(
            "depth-zero",
            name="depth-zero-matched",
            overrides=small,
            lrs={},
            note="depth-vs-width: 2 x d64 FFN 256 -> 4 layers, sparkling's recipe",
        )
    }


def study_parts(tune_lrs=TUNE_LRS) -> dict:
    return {
        "tune": LrGrid(ARMS, TUNING_SEEDS, "tune/", tuple(tune_lrs)),
        "eval": Arms(ARMS, EVAL_SEEDS, tuned_by="tune", untuned_lrs=tune_lrs[0]),
    }
