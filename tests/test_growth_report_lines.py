"""growth/report.py: the lines `nexus grow` prints (`format_report`) and the two lines a growth inside
training prints (`growth_summary`), field by field, with and without each optional part."""

from __future__ import annotations

from nexus.growth.report import format_report, growth_summary


def test_format_report_lists_each_entry_with_floats_to_six_digits():
    text = format_report({"family": "width"}, {"hidden": "64 -> 96", "ratio": 1.23456789, "n": 3}, "out/x")
    assert text.split("\n") == ["grew (width) -> out/x", "  hidden: 64 -> 96", "  ratio: 1.23457", "  n: 3"]
    assert format_report({}, {}, "o") == "grew (None) -> o"


def test_format_report_gives_the_verification_and_names_dead_blocks():
    ver = {
        "max_abs_dlogits": 1.5e-7,
        "dead_blocks": ["b1", "b2"],
        "new_block_grad_norms": {"b1": 0.0, "b2": 0.0, "b3": 1.0, "b4": 2.0, "b5": 3.0},
    }
    lines = format_report({"family": "width"}, {"verify": ver, "x": 1}, "o").split("\n")
    assert lines == [
        "grew (width) -> o",
        "  x: 1",
        "  verification: max |dlogits| = 1.500e-07",
        "  new blocks with non-zero gradient within two probe steps: 3/5",
        "  WARNING dead blocks (zero gradient, will never train): b1, b2",
    ]
    dead = [f"d{i}" for i in range(9)]
    lines = format_report({"family": "w"}, {"verify": {"dead_blocks": dead}}, "o").split("\n")
    assert lines == [
        "grew (w) -> o",
        "  verification: max |dlogits| = nan",
        "  WARNING dead blocks (zero gradient, will never train): " + ", ".join(dead[:8]) + " ...",
    ]
    lines = format_report(
        {"family": "w"}, {"verify": {"max_abs_dlogits": 0.0, "dead_blocks": dead[:8], "new_block_grad_norms": {}}}, "o"
    ).split("\n")
    assert lines[-1] == "  WARNING dead blocks (zero gradient, will never train): " + ", ".join(dead[:8])
    lines = format_report(
        {"family": "w"},
        {"verify": {"max_abs_dlogits": 2.0, "dead_blocks": None, "new_block_grad_norms": {"a": 1.0}}},
        "o",
    ).split("\n")
    assert lines[1:] == [
        "  verification: max |dlogits| = 2.000e+00",
        "  new blocks with non-zero gradient within two probe steps: 1/1",
    ]
    assert format_report({"family": "w"}, {"verify": {}}, "o") == "grew (w) -> o"
    # an exactly preserved function reads 0.0, never a rounded-looking 0.000e+00; the smallest non-zero change not 0.0
    exact = format_report({"family": "depth"}, {"verify": {"max_abs_dlogits": 0.0}}, "o").split("\n")
    assert exact[1] == "  verification: max |dlogits| = 0.0 (exact)"
    tiny = format_report({"family": "depth"}, {"verify": {"max_abs_dlogits": 5e-324}}, "o").split("\n")
    assert tiny[1] == "  verification: max |dlogits| = 4.941e-324"


def test_growth_summary_says_what_grew_the_params_the_state_policy_and_the_rewarmup():
    line = growth_summary(
        5,
        {"family": "width", "optimizer_state": "copy", "rewarmup": {"rho": 1.3, "tau": 20}},
        {"hidden": "64 -> 96", "rewarmup": "ignored", "n": 3, "ffn": "128 -> 256"},
        1_234_567,
        2_500_000,
    )
    assert line == (
        "grew at step 5 (width): hidden 64 -> 96, ffn 128 -> 256 | params 1.23M -> 2.5M | "
        "optimizer state copy | re-warmup of the new entries rho 1.3 over 20 steps"
    )
    line = growth_summary(0, {}, {"n": 3}, 10, 20)
    assert line == (
        "grew at step 0 (?): model grown | params 1e-05M -> 2e-05M | optimizer state - | "
        "no re-warmup (new entries on the base schedule)"
    )
    line = growth_summary(1, {"rewarmup": None}, {"rms_ratio_per_layer": [1.0, 0.5], "loss_jump": 0.01234}, 1, 1)
    assert line.split("\n") == [
        "grew at step 1 (?): model grown | params 1e-06M -> 1e-06M | optimizer state - | "
        "no re-warmup (new entries on the base schedule)",
        "  activation RMS ratio per layer (grown/original) [1.0, 0.5], validation-batch loss jump +0.0123",
    ]
    assert growth_summary(1, {}, {"loss_jump": -2.0}, 1, 1).split("\n")[1] == "  validation-batch loss jump -2.0000"
    assert growth_summary(1, {}, {"rms_ratio_per_layer": [2.0]}, 1, 1).split("\n")[1] == (
        "  activation RMS ratio per layer (grown/original) [2.0]"
    )


def test_growth_summary_gives_params_in_millions_to_three_digits():
    # 1,235,001 parameters are 1.235001M: three significant digits round up to 1.24 (a divisor off by one
    # part in a million would give 1.23)
    line = growth_summary(2, {}, {}, 1_235_001, 2_345_001)
    assert " | params 1.24M -> 2.35M | " in line, line
