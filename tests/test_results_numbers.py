"""Every number of the results' prose comes from a generated table (raco_bench/report/overview.py)."""

from __future__ import annotations

from raco_bench.report.overview import (
    PARAGRAPH,
    block,
    generated_values,
    hand_written,
    numbers_in,
    replace_block,
    unsupported_numbers,
    write_overview,
)


def test_generated_blocks_are_replaced_and_nothing_else(tmp_path):
    text = "intro 0.5\n" + block("verdicts", "old 0.1") + "\nafter\n"
    new = replace_block(text, "verdicts", "new table")
    assert new == "intro 0.5\n" + block("verdicts", "new table") + "\nafter\n"
    assert replace_block("no block here", "verdicts", "x") == "no block here"
    readme = tmp_path / "README.md"
    (tmp_path / "results").mkdir()
    readme.write_text("# Project\n\n" + block(PARAGRAPH, "stale 0.42") + "\n")
    assert write_overview(tmp_path / "results", readme) == [readme]
    assert "stale" not in readme.read_text() and "No study has repeats yet" in readme.read_text()


def test_a_number_the_prose_carries_that_no_generated_table_holds_is_caught(tmp_path):
    root = tmp_path / "results"
    (root / "study").mkdir(parents=True)
    (root / "study" / "README.md").write_text("| method | test error |\n|---|---|\n| raco-dp | 0.1737 |\n")
    (root / "README.md").write_text(
        "RaCO-DP reached 0.1737 (cited) against 0.0520 (stale); `--gammas 0.05 0.33` is code; the paper says \"87.5% accuracy\"; "
        "[a link](x/0.77.md); 200 configurations are an integer.\n" + block("verdicts", "| x | 0.2468 |") + "\nThe block's 0.2468 may be cited.\n")
    generated = generated_values(root)
    assert "0.2468" in generated and "0.1737" in generated
    assert numbers_in(hand_written((root / "README.md").read_text())) == ["0.1737", "0.0520", "0.2468"]
    assert unsupported_numbers((root / "README.md").read_text(), generated) == ["0.0520"]
    assert unsupported_numbers("0.174 is 0.1737 rounded otherwise", generated) == ["0.174"]  # cite with the table's digits


def test_a_claims_section_cites_one_pages_verdicts_and_cells(tmp_path):
    """``verdicts PAGE`` and ``repeats PAGE`` blocks hold that page's tables (written from its repeats.csv and paired.csv)."""
    from test_repeat_pages import _page

    page = _page(tmp_path, [-0.050, -0.046, -0.052, -0.048])  # tmp_path/results/adult-repeats, RaCO-DP clearly ahead at γ = 0.1
    root = page.parent
    (root / "README.md").write_text("# Results\n\n" + block("verdicts adult-repeats", "") + "\n\n" + block("repeats adult-repeats", "")
                                    + "\n\n" + block("verdicts nowhere", "") + "\n")
    assert write_overview(root) == [root / "README.md"]
    text = (root / "README.md").read_text()
    assert "better" in text and "searched per repeat" in text and "[nowhere](nowhere/README.md) has no paired comparisons yet." in text
    assert unsupported_numbers("RaCO-DP's difference is cited from the table.", generated_values(root)) == []
