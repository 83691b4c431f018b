"""`nexus plot RUN [RUN ...]`: loss of existing runs against tokens, FLOPs and wall time, as a PNG and a CSV."""

import csv
import json
from pathlib import Path

import pytest
from PIL import Image

from nexus.cli import main


def _train(out: Path, *extra: str) -> Path:
    argv = [
        "train",
        "--preset",
        "baseline-micro",
        "--out",
        str(out),
        "--quiet",
        "--train.steps",
        "12",
        "--train.eval_every",
        "4",
        "--train.log_every",
        "2",
        "--train.batch_size",
        "2",
        "--data.seq_len",
        "32",
        "--train.sample_every",
        "0",
        "--train.save_every",
        "0",
        "--train.eval_batches",
        "1",
        *extra,
    ]
    assert main(argv) == 0
    return out


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    plain = _train(root / "plain")
    grown = _train(root / "grown", "--grow-at", "6", "--width.hidden", "96")
    return plain, grown


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_plot_writes_a_png_and_a_csv_with_every_runs_points(two_runs, tmp_path, capsys):
    plain, grown = two_runs
    out = tmp_path / "cmp"
    assert main(["plot", str(plain), str(grown / "checkpoint"), "--out", str(out)]) == 0
    assert f"wrote {out}.png and {out}.csv" in capsys.readouterr().out
    with Image.open(f"{out}.png") as im:
        # 18 x 5.5 inches at 150 dpi: slide-sized, not a thumbnail (issue 50 item 6: >= 150 dpi)
        assert im.format == "PNG" and im.size == (2700, 825) and round(im.info["dpi"][0]) == 150
    rows = list(csv.DictReader(open(f"{out}.csv")))
    for run in (plain, grown):
        mine = [r for r in rows if r["run"] == run.name]
        recorded = _metrics(run)
        # every validation loss the run logged, at its step, with tokens = step x batch x seq_len
        val = {int(r["step"]): r["val_loss"] for r in recorded if "val_loss" in r}
        got = {int(r["step"]): r for r in mine if r["series"] == "val"}
        assert set(got) == set(val)
        for step, loss in val.items():
            assert float(got[step]["loss"]) == pytest.approx(loss, abs=1e-6)
            assert int(got[step]["tokens"]) == step * 2 * 32
        train = {int(r["step"]): r["loss"] for r in recorded if "loss" in r and r.get("event") is None}
        assert {int(r["step"]) for r in mine if r["series"] == "train"} == set(train)
        flops = [float(r["flops"]) for r in mine if r["series"] == "train"]
        assert flops == sorted(flops) and flops[0] > 0
    growth = [r for r in rows if r["series"] == "growth"]
    assert [(r["run"], int(r["step"])) for r in growth] == [(grown.name, 6)]
    # the grown model costs more per token after step 6: FLOPs per token rise there, not before
    g = sorted((int(r["step"]), float(r["flops"])) for r in rows if r["run"] == grown.name and r["series"] == "train")
    p = dict((int(r["step"]), float(r["flops"])) for r in rows if r["run"] == plain.name and r["series"] == "train")
    assert g[1][1] == pytest.approx(p[g[1][0]]) and g[-1][1] > p[g[-1][0]] * 1.05


def test_plot_bad_run_is_one_line_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "empty"), "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "metrics.jsonl" in err
    assert list(tmp_path.iterdir()) == [tmp_path / "empty"]


def _ema_reference(values: list[float], w: float) -> list[float]:
    """The debiased EMA from its definition: point i = sum_j w^(i-j) (1-w) v_j / sum_j w^(i-j) (1-w)."""
    out = []
    for i in range(len(values)):
        weights = [w ** (i - j) * (1 - w) for j in range(i + 1)]
        out.append(sum(a * v for a, v in zip(weights, values[: i + 1])) / sum(weights))
    return out


def test_ema_matches_its_definition():
    from nexus.experiments.run_plot import ema, smoothing_weight

    vals = [5.5, 4.0, 3.9, 3.2, 3.5, 3.1, 2.9, 3.0]
    for w in (0.0, 0.5, 0.9):
        assert ema(vals, w) == pytest.approx(_ema_reference(vals, w), rel=1e-12)
    assert smoothing_weight(10) == 0.0 and smoothing_weight(300) == pytest.approx(0.9)


def test_plot_smooths_the_train_curve_emphasises_validation_and_takes_log_axes(two_runs, tmp_path, capsys, monkeypatch):
    """Issue 40 item 10: the raw train curves overlapped into noise and the first drop took the linear axis."""
    import nexus.figures

    figures = []
    real_save = nexus.figures.save_figure
    monkeypatch.setattr(
        nexus.figures, "save_figure", lambda fig, path, **kw: (figures.append(fig), real_save(fig, path, **kw))[1]
    )
    out = tmp_path / "p"
    assert main(["plot", *map(str, two_runs), "--out", str(out), "--logx", "--logy", "--smooth", "0.6"]) == 0
    rows = list(csv.DictReader(open(f"{out}.csv")))
    for run in two_runs:
        raw = [float(r["loss"]) for r in rows if r["run"] == run.name and r["series"] == "train"]
        smooth = [float(r["loss"]) for r in rows if r["run"] == run.name and r["series"] == "train_ema"]
        assert smooth == pytest.approx(_ema_reference(raw, 0.6), abs=1e-6) and smooth != pytest.approx(raw)
    (fig,) = figures
    for ax in fig.axes:
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        lines = [ln for ln in ax.get_lines() if ln.get_marker() not in (None, "None", "")]  # validation: marked
        train = [ln for ln in ax.get_lines() if ln.get_marker() in (None, "None", "") and ln.get_linestyle() == "-"]
        assert lines and train
        assert min(ln.get_linewidth() for ln in lines) > max(ln.get_linewidth() for ln in train)
        assert min(ln.get_zorder() for ln in lines) > max(ln.get_zorder() for ln in train)
        assert min(ln.get_alpha() or 1 for ln in train) < 0.3  # the raw curve, faint behind its EMA
    assert Image.open(f"{out}.png").size[0] >= 1600


def test_plot_bad_smoothing_is_one_line(two_runs, tmp_path, capsys):
    assert main(["plot", str(two_runs[0]), "--out", str(tmp_path / "p"), "--smooth", "1.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--smooth='1.5'" in err[0]
    assert not list(tmp_path.iterdir())


def test_plot_takes_a_dpi_and_writes_svg_or_pdf(two_runs, tmp_path, capsys):
    plain = str(two_runs[0])
    assert main(["plot", plain, "--out", str(tmp_path / "hi"), "--dpi", "300"]) == 0
    with Image.open(tmp_path / "hi.png") as im:
        assert im.size == (18 * 300, round(5.5 * 300)) and round(im.info["dpi"][0]) == 300
    assert main(["plot", plain, "--out", str(tmp_path / "v"), "--format", "svg"]) == 0
    assert "<svg" in (tmp_path / "v.svg").read_text()[:2000] and (tmp_path / "v.csv").is_file()
    assert main(["plot", plain, "--out", str(tmp_path / "d"), "--format", "pdf"]) == 0
    assert (tmp_path / "d.pdf").read_bytes()[:5] == b"%PDF-"
    assert not (tmp_path / "v.png").exists() and not (tmp_path / "d.png").exists()
    assert f"wrote {tmp_path / 'd'}.pdf and {tmp_path / 'd'}.csv" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, needle", [(["--dpi", "20"], "--dpi='20'"), (["--dpi", "x"], "--dpi='x'"), (["--format", "jpg"], "--format")]
)
def test_plot_bad_dpi_or_format_is_one_line_and_writes_nothing(two_runs, tmp_path, capsys, args, needle):
    assert main(["plot", str(two_runs[0]), "--out", str(tmp_path / "p"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not list(tmp_path.iterdir())


def _checkpoint_params(ckpt: Path) -> int:
    """Parameters the checkpoint's weights file holds."""
    from safetensors.torch import load_file

    return sum(t.numel() for t in load_file(str(ckpt / "model.safetensors")).values())


@pytest.fixture(scope="module")
def grown_then_resumed(tmp_path_factory):
    """Issue 50's repro, small: a base run, `nexus grow` on its checkpoint, the grown run resumed to its end."""
    root = tmp_path_factory.mktemp("resumed")
    base = _train(root / "gbase", "--train.steps", "6")
    wide = root / "gwide"
    assert (
        main(
            [
                "grow",
                "--checkpoint",
                str(base / "checkpoint"),
                "--out",
                str(wide),
                "--width.hidden",
                "96",
                "--train.steps",
                "12",
                "--no-verify",
            ]
        )
        == 0
    )
    assert main(["train", "--resume", str(wide), "--quiet"]) == 0
    return base, wide


def test_plot_prices_a_resumed_grown_runs_tokens_before_the_growth_at_the_small_models_flops(
    grown_then_resumed, tmp_path
):
    """The truth from the two runs' own configs and steps (not the growth record): base steps at the base model's
    FLOPs per token, the steps after the growth at the grown model's."""
    from nexus.analysis.flops import train_flops_per_token
    from nexus.checkpoint import read_config

    base, wide = grown_then_resumed
    out = tmp_path / "c"
    assert main(["plot", str(base), str(wide), "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(f"{out}.csv")))
    small_cfg, wide_cfg = read_config(base / "checkpoint"), read_config(wide / "checkpoint")
    assert small_cfg.model.d_model == 64 and wide_cfg.model.d_model == 96  # two different models
    tokens_per_step = 2 * 32
    base_steps = max(json.loads(line)["step"] for line in (base / "metrics.jsonl").read_text().splitlines())
    last_step = max(int(r["step"]) for r in rows if r["run"] == wide.name)
    truth_at_growth = base_steps * tokens_per_step * train_flops_per_token(small_cfg.model, 32)
    truth_end = truth_at_growth + (last_step - base_steps) * tokens_per_step * train_flops_per_token(wide_cfg.model, 32)
    growth = [r for r in rows if r["run"] == wide.name and r["series"] == "growth"]
    assert [int(r["step"]) for r in growth] == [base_steps]
    assert float(growth[0]["flops"]) == pytest.approx(truth_at_growth, rel=0.01)
    base_end = max((r for r in rows if r["run"] == base.name), key=lambda r: int(r["step"]))
    assert float(growth[0]["flops"]) == pytest.approx(float(base_end["flops"]), rel=0.01)  # where the base run ends
    end = max((r for r in rows if r["run"] == wide.name and r["series"] == "val"), key=lambda r: int(r["step"]))
    assert int(end["step"]) == last_step and float(end["flops"]) == pytest.approx(truth_end, rel=0.01)


def test_quiet_result_of_a_run_grown_in_training_counts_the_grown_model(two_runs, tmp_path, capsys):
    out = tmp_path / "g"
    capsys.readouterr()
    _train(out, "--grow-at", "6", "--width.hidden", "96", "--train.steps", "8")
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    held = _checkpoint_params(out / "checkpoint")
    small = _checkpoint_params(two_runs[0] / "checkpoint")
    assert held > small * 1.2  # the growth made it bigger: the two counts differ
    assert result["params"] == held
