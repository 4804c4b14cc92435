"""Estimates of tokens, time and cost, the price table and the throughput records."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from core.check import CheckReport
from core.plan.estimate import (
    estimate,
    estimate_lines,
    format_duration,
    measured_throughput,
    record_throughput,
)
from core.plan.pricing import (
    ModelPrice,
    PriceError,
    PriceTable,
    load_prices,
    save_prices,
    table_from_rows,
)

MODEL = "SmolLM2-135M-Instruct"


def report_for(lines: int = 100, prompt: int = 5_000, max_out: int = 20_000) -> CheckReport:
    report = CheckReport(path="x.jsonl", lines=lines, valid=lines)
    report.by_local_model["/models/" + MODEL] = {
        "folder": "/models/" + MODEL,
        "name": MODEL,
        "lines": lines,
        "prompt_tokens": prompt,
        "max_output_tokens": max_out,
    }
    return report


def test_without_a_measurement_the_estimate_says_so_plainly(tmp_path: Path) -> None:
    result = estimate(report_for(), PriceTable(), expected_share=0.25, home=tmp_path)
    assert result.input_tokens == 5_000
    assert (result.max_output_tokens, result.expected_output_tokens) == (20_000, 5_000)
    assert result.seconds is None and result.cost is None
    assert result.notes == [
        f"no throughput measured yet for {MODEL} on this machine: no time estimate "
        "(a finished run records one)"
    ]
    assert "total: time unknown, cost unknown" in estimate_lines(result)


def test_a_recorded_run_gives_time_and_the_expected_answer_length(tmp_path: Path) -> None:
    assert measured_throughput(MODEL, tmp_path) is None
    record_throughput(MODEL, output_tokens_per_s=80.0, requests_per_s=2.0, home=tmp_path)
    record_throughput(MODEL, output_tokens_per_s=100.0, requests_per_s=2.0, home=tmp_path)
    measured = measured_throughput(MODEL, tmp_path)
    assert measured.output_tokens_per_s == 100.0 and measured.output_tokens_per_request == 50
    result = estimate(report_for(), PriceTable(), home=tmp_path)
    assert result.expected_output_tokens == 100 * 50
    assert result.seconds == pytest.approx(50.0)
    assert format_duration(result.seconds) == "50 s"


def test_expected_output_never_exceeds_the_maximum(tmp_path: Path) -> None:
    record_throughput(MODEL, output_tokens_per_s=1000.0, requests_per_s=1.0, home=tmp_path)
    result = estimate(report_for(max_out=300), PriceTable(), home=tmp_path)
    assert result.expected_output_tokens == 300


def test_prices_per_token_and_per_gpu_hour(tmp_path: Path) -> None:
    per_token = PriceTable(models={MODEL: ModelPrice(input_per_1m=2.0, output_per_1m=10.0)})
    result = estimate(report_for(), per_token, expected_share=0.5, home=tmp_path)
    assert result.cost == pytest.approx((5_000 * 2.0 + 10_000 * 10.0) / 1e6)
    assert result.models[0].max_cost == pytest.approx((5_000 * 2.0 + 20_000 * 10.0) / 1e6)
    gpu = PriceTable(models={MODEL: ModelPrice(gpu_hour=3.6)}, budget=0.01)
    unmeasured = estimate(report_for(), gpu, home=tmp_path)
    assert unmeasured.cost is None
    assert unmeasured.models[0].cost_basis == "a GPU-hour price needs a measured throughput"
    record_throughput(MODEL, output_tokens_per_s=10.0, requests_per_s=1.0, home=tmp_path)
    measured = estimate(report_for(), gpu, home=tmp_path)
    assert measured.seconds == pytest.approx(100.0)
    assert measured.cost == pytest.approx(0.1)
    assert "(= 100.00 per 1M output tokens at the measured 10 tokens/s)" in (
        measured.models[0].cost_basis
    )
    assert measured.over_budget
    assert "OVER budget: a run needs explicit confirmation" in " ".join(estimate_lines(measured))


def test_an_unknown_cost_is_never_over_budget(tmp_path: Path) -> None:
    result = estimate(report_for(), PriceTable(budget=0.0), home=tmp_path)
    assert not result.over_budget
    assert "cannot be compared" in " ".join(estimate_lines(result))


def test_a_report_without_token_counts_has_no_estimate(tmp_path: Path) -> None:
    result = estimate(CheckReport(path="x", lines=1, valid=1), PriceTable(), home=tmp_path)
    assert result.models == [] and "prompt tokens were not counted" in result.notes[0]
    empty = estimate(CheckReport(path="x"), PriceTable(), home=tmp_path)
    assert empty.notes == ["no estimate: the file has no valid lines"]


def test_the_price_table_survives_a_round_trip_and_edits(tmp_path: Path) -> None:
    assert load_prices(tmp_path) == PriceTable()
    table = PriceTable(models={MODEL: ModelPrice(input_per_1m=1.0, output_per_1m=2.0)}, budget=5.0)
    save_prices(table, tmp_path)
    assert load_prices(tmp_path) == table
    # What st.data_editor hands back: NaN for an emptied cell, text for a typed one.
    rows = [
        {"model": MODEL, "Input / 1M tokens": math.nan, "Output / 1M tokens": "4", "GPU hour": ""}
    ]
    edited = table_from_rows(rows, table, budget=None)
    assert edited.models[MODEL] == ModelPrice(output_per_1m=4.0)
    assert edited.budget is None
    save_prices(edited, tmp_path)
    assert load_prices(tmp_path).models[MODEL].output_per_1m == 4.0  # saved, not dropped
    rows[0]["GPU hour"] = -1
    with pytest.raises(PriceError, match="GPU hour: input should be greater than or equal to 0"):
        table_from_rows(rows, table, budget=None)
    (tmp_path / "prices.json").write_text("not json")
    assert load_prices(tmp_path) == PriceTable()


def test_a_bad_throughput_file_reads_as_no_measurement(tmp_path: Path) -> None:
    (tmp_path / "throughput.json").write_text('{"' + MODEL + '": [{"output_tokens_per_s": "x"}]}')
    assert measured_throughput(MODEL, tmp_path) is None
    record_throughput(MODEL, 0.0, 0.0, tmp_path)  # a run that produced nothing is not kept
    assert measured_throughput(MODEL, tmp_path) is None
