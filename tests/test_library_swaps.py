"""Where a library replaced hand-written code (issue 25 item 6): numpy.interp reads curves, tabulate lays out
console tables. Expected values are computed by hand from the inputs."""

import pytest

from nexus.cli import main


def test_value_at_interpolates_inside_the_curve_and_refuses_outside():
    from nexus.experiments.curves import value_at

    assert value_at([0, 10, 20], [5.0, 3.0, 1.0], 15) == pytest.approx(2.0)  # halfway from 3 to 1
    assert value_at([0, 10, 20], [5.0, 3.0, 1.0], 0) == 5.0 and value_at([0, 10, 20], [5.0, 3.0, 1.0], 20) == 1.0
    assert value_at([0, 10], [5.0, 3.0], 11) is None and value_at([0, 10], [5.0, 3.0], -1) is None
    assert value_at([], [], 0) is None


def test_first_crossing_takes_the_first_segment_that_reaches_the_target():
    from nexus.experiments.curves import first_crossing

    # falls to 2.0 between x=10 (3.0) and x=20 (1.0): 3 -> 1 over 10, target 2 at x=15; the later dip is ignored
    assert first_crossing([0, 10, 20, 30, 40], [5.0, 3.0, 1.0, 4.0, 0.5], 2.0) == pytest.approx(15.0)
    assert first_crossing([0, 10, 20], [5.0, 2.0, 1.0], 2.0) == pytest.approx(10.0)  # reached exactly at a point


def test_presets_table_has_a_header_and_one_aligned_row_per_preset(capsys):
    from nexus.presets import names

    assert main(["presets", "--filter", "micro"]) == 0
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    want = [n for n in names() if "micro" in n]
    assert lines[0].split()[:4] == ["preset", "params", "fp16", "ternary"] and len(lines) == len(want) + 1
    assert [line.split()[0] for line in lines[1:]] == want
    right_edge = lines[0].index("params") + len("params")  # the params column is right-aligned under its header
    assert all(line[right_edge - 1] == "M" and line[right_edge] == " " for line in lines[1:])


def test_analysis_summary_table_aligns_its_columns():
    from nexus.analysis.representations import summarize_representations

    result = {
        "layers": [0, 1, 10],
        "token_similarity": [0.5, 0.25, 0.125],
        "effective_rank": [3.0, 12.5, 7.0],
        "refinement_stage": {},
        "anchor_removal": {},
    }
    lines = summarize_representations(result).splitlines()
    assert lines[0].split() == ["layer", "token_sim", "eff_rank"]
    ends = {len(line.rstrip()) for line in lines[:4]}
    assert len(ends) == 1  # right-aligned: every row ends where the header does
    assert [line.split()[0] for line in lines[1:4]] == ["0", "1", "10"]
