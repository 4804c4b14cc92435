"""Estimates of tokens, time and cost, the price table and the throughput records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from core.check import CheckReport, check_file
from core.config import default_model_dir
from core.plan.estimate import estimate, estimate_lines
from core.plan.measured import Answer, model_record, record_run
from core.plan.pricing import (
    ModelPrice,
    PriceError,
    PriceTable,
    load_prices,
    save_prices,
    table_from_rows,
)
from tests.support.jobs import request_line

MODEL = "SmolLM2-135M-Instruct"


def report_for(lines: int = 100, prompt: int = 5_000, max_out: int = 20_000) -> CheckReport:
    report = CheckReport(path="x.jsonl", lines=lines, valid=lines)
    report.by_local_model["/models/" + MODEL] = {
        "folder": "/models/" + MODEL,
        "name": MODEL,
        "lines": lines,
        "prompt_tokens": prompt,
        "max_output_tokens": max_out,
        "limits": {str(max_out // lines): lines},
    }
    return report


def measured(
    home: Path, tokens_per_s: float, answers: list[Answer], load_seconds: float | None = None
) -> None:
    """Records a run of ``MODEL``: 100 requests at ``tokens_per_s`` with these answers."""
    record_run(
        MODEL,
        output_tokens=round(tokens_per_s * 10),
        requests=100,
        seconds=10.0,
        answers=answers,
        load_seconds=load_seconds,
        home=home,
    )


def test_without_a_measurement_the_estimate_says_so_plainly(tmp_path: Path) -> None:
    result = estimate(report_for(), PriceTable(), expected_share=0.25, home=tmp_path)
    assert result.input_tokens == 5_000
    assert (result.max_output_tokens, result.expected_output_tokens) == (20_000, 5_000)
    assert result.seconds is None and result.cost is None
    assert result.notes == [
        f"no run of {MODEL} measured yet on this machine: no time estimate "
        "(a finished run records one)"
    ]
    assert "total: time unknown, cost no price" in estimate_lines(result)
    assert result.to_dict()["cost_text"] == "no price"  # the pages' Cost (never 0.00 USD)


def test_time_is_the_expected_output_at_the_measured_speed_plus_the_model_load(
    tmp_path: Path,
) -> None:
    measured(tmp_path, 100.0, [Answer(tokens=50, limit=200, truncated=False)] * 4, 21.0)
    result = estimate(report_for(), PriceTable(), home=tmp_path)
    assert result.expected_output_tokens == 100 * 50  # 100 lines, 50 tokens each
    assert result.seconds == pytest.approx(50.0 + 21.0)  # 5,000 tokens at 100/s, then load
    assert "model load 21 s included" in estimate_lines(result)[0]
    assert json.dumps(result.to_dict())  # the report download carries it
    # A worker holding the model loaded skips the load.
    loaded = estimate(report_for(), PriceTable(), loaded=frozenset({MODEL}), home=tmp_path)
    assert loaded.seconds == pytest.approx(50.0)
    assert f"no model load: the engine holds {MODEL} loaded now" in estimate_lines(loaded)[0]


def test_measured_answers_are_replayed_against_each_lines_own_limit(tmp_path: Path) -> None:
    # A max_tokens=8 run where every answer hit its limit says only "at least 8 tokens".
    measured(tmp_path, 100.0, [Answer(tokens=8, limit=8, truncated=True)] * 10)
    result = estimate(report_for(lines=10, max_out=640), PriceTable(), home=tmp_path)
    assert result.expected_output_tokens == 640  # 64 each, never 8
    # Answers that ended on their own at 30 tokens under a limit of 64: 30 under a higher
    # limit, cut at a lower one; lines with different limits are each scaled by their own.
    (tmp_path / "throughput.json").unlink()
    measured(tmp_path, 100.0, [Answer(tokens=30, limit=64, truncated=False)] * 10)
    report = report_for(lines=20, max_out=10 * 16 + 10 * 128)
    report.by_local_model["/models/" + MODEL]["limits"] = {"16": 10, "128": 10}
    assert estimate(report, PriceTable(), home=tmp_path).expected_output_tokens == 160 + 300


def test_measurements_keep_the_newest_runs_and_read_the_first_format(tmp_path: Path) -> None:
    assert model_record(MODEL, tmp_path).throughput is None
    first_format = {MODEL: [{"output_tokens_per_s": 80, "requests_per_s": 2}, {"x": 1}]}
    (tmp_path / "throughput.json").write_text(json.dumps(first_format))
    assert model_record(MODEL, tmp_path).throughput.output_tokens_per_s == 80
    measured(tmp_path, 100.0, [Answer(tokens=5, limit=9, truncated=False)])
    record = model_record(MODEL, tmp_path)
    assert [r.output_tokens_per_s for r in record.runs] == [80, 100]
    assert record.expected_tokens(9) == 5 and record.expected_tokens(3) == 3


def test_prices_per_token_and_per_gpu_hour(tmp_path: Path) -> None:
    per_token = PriceTable(models={MODEL: ModelPrice(input_per_1m=2.0, output_per_1m=10.0)})
    result = estimate(report_for(), per_token, expected_share=0.5, home=tmp_path)
    assert result.cost == pytest.approx((5_000 * 2.0 + 10_000 * 10.0) / 1e6)
    assert result.models[0].max_cost == pytest.approx((5_000 * 2.0 + 20_000 * 10.0) / 1e6)
    gpu = PriceTable(models={MODEL: ModelPrice(gpu_hour=3.6)}, budget=0.01)
    unmeasured = estimate(report_for(), gpu, home=tmp_path)
    assert unmeasured.cost is None
    assert unmeasured.models[0].cost_basis == "a GPU-hour price needs a measured throughput"
    measured(tmp_path, 10.0, [])
    measured_gpu = estimate(report_for(), gpu, expected_share=0.5, home=tmp_path)
    assert measured_gpu.seconds == pytest.approx(1000.0)  # 10,000 expected tokens at 10/s
    assert measured_gpu.cost == pytest.approx(1.0)
    assert "(= 100.00 per 1M output tokens at the measured 10 tokens/s)" in (
        measured_gpu.models[0].cost_basis
    )
    assert measured_gpu.over_budget
    lines = " ".join(estimate_lines(measured_gpu))
    assert "OVER budget: a run needs explicit confirmation" in lines


def test_an_embeddings_file_is_timed_by_its_input_tokens_at_the_measured_input_speed(
    tmp_path: Path,
) -> None:
    embedder = "all-MiniLM-L6-v2"
    report = CheckReport(path="x.jsonl", lines=400, valid=400)
    report.by_local_model["/models/" + embedder] = {
        "folder": "/models/" + embedder,
        "name": embedder,
        "embedding": True,
        "lines": 400,
        "prompt_tokens": 40_000,
        "max_output_tokens": 0,
        "limits": {},
    }
    gpu = PriceTable(models={embedder: ModelPrice(gpu_hour=3.6)})
    unmeasured = estimate(report, gpu, home=tmp_path)
    assert unmeasured.seconds is None and "no run of all-MiniLM-L6-v2" in unmeasured.notes[0]
    # A run of the embedding model: 8,000 input tokens in 4 s, no output at all.
    record_run(
        embedder, output_tokens=0, input_tokens=8_000, requests=80, seconds=4.0, answers=[],
        load_seconds=12.0, home=tmp_path,
    )  # fmt: skip
    assert model_record(embedder, tmp_path).throughput.input_tokens_per_s == 2_000
    result = estimate(report, gpu, home=tmp_path)
    assert result.notes == []
    assert result.expected_output_tokens == 0 and result.max_output_tokens == 0
    assert result.seconds == pytest.approx(40_000 / 2_000 + 12.0)  # then the model load
    assert result.cost == pytest.approx(32.0 / 3600 * 3.6)
    assert "(= 0.50 per 1M input tokens at the measured 2,000 tokens/s)" in (
        result.models[0].cost_basis
    )
    assert "400 requests, 40,000 input tokens, embeddings; time 32 s" in (estimate_lines(result)[0])
    per_token = PriceTable(models={embedder: ModelPrice(input_per_1m=0.02)})
    assert estimate(report, per_token, home=tmp_path).cost == pytest.approx(40_000 * 0.02 / 1e6)


def test_greedy_copies_are_billed_but_take_no_engine_time(tmp_path: Path) -> None:
    # 10 greedy lines of n=3 (one answer, copied twice) and 10 sampled lines of n=3.
    path = tmp_path / "n3.jsonl"
    lines = [
        request_line(f"g{i}", "Name a colour.", max_tokens=20, n=3, temperature=0)
        for i in range(10)
    ] + [
        request_line(f"s{i}", "Name a colour.", max_tokens=20, n=3, temperature=0.7)
        for i in range(10)
    ]
    path.write_text("\n".join(lines) + "\n")
    report = check_file(path, model_folder=default_model_dir())
    [local] = report.by_local_model.values()
    assert local["limits"] == {"20": 60} and local["copied"] == {"20": 20}
    assert local["name"] == MODEL
    measured(tmp_path, 100.0, [Answer(tokens=10, limit=20, truncated=False)] * 4)
    result = estimate(report, PriceTable(), home=tmp_path)
    assert result.expected_output_tokens == 60 * 10  # every answer is billed, copies too
    assert result.max_output_tokens == 60 * 20
    assert result.seconds == pytest.approx(40 * 10 / 100.0)  # the engine writes 40 answers


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


def test_a_bad_measurements_file_reads_as_no_measurement(tmp_path: Path) -> None:
    (tmp_path / "throughput.json").write_text('{"' + MODEL + '": [{"output_tokens_per_s": "x"}]}')
    assert model_record(MODEL, tmp_path).throughput is None
    (tmp_path / "throughput.json").write_text("not json")
    assert model_record(MODEL, tmp_path).answers == []
    # A run that produced nothing records no speed.
    record_run(MODEL, output_tokens=0, requests=0, seconds=1.0, answers=[], home=tmp_path)
    assert model_record(MODEL, tmp_path).throughput is None


def test_money_keeps_the_figures_its_size_needs() -> None:
    """Issue 30, item 6: 0.0009 USD never reads as 0.00."""
    from core.plan.pricing import format_money

    assert format_money(0.000915, "USD") == "0.000915 USD"
    assert format_money(0.001) == "0.001"
    assert format_money(0.0123456) == "0.0123"
    assert format_money(0.5) == "0.5"
    assert format_money(1234.5, "EUR") == "1,234.50 EUR"
    assert format_money(0) == "0.00"
    assert format_money(None) == format_money(math.nan) == "unknown"


def test_a_model_without_a_price_costs_no_price_never_zero(tmp_path: Path) -> None:
    """Issue 38, item 14: a model without prices showed 0.00 USD."""
    from core.plan.pricing import Cost, Usage, cost_text, usage_cost

    other = PriceTable(models={"other": ModelPrice(input_per_1m=1.0)})
    assert cost_text(None) == cost_text(math.nan) == "no price"
    assert cost_text(0.0009, "USD") == "0.0009 USD"
    # The one rule (Results and Dashboards add these up): unknown, never 0.00 (free).
    assert usage_cost(other, MODEL, Usage(1, 1_000, 1_000)) == Cost(None, None)
    assert usage_cost(other, "other", Usage(1, 1_000, 0)).spent == pytest.approx(0.001)
    # The estimate says "no price" for a model with none, "unknown" for a price it cannot
    # turn into a cost (a GPU-hour price without a measured speed).
    assert estimate(report_for(), other, home=tmp_path).cost_text == "no price"
    gpu = PriceTable(models={MODEL: ModelPrice(gpu_hour=3.6)})
    assert estimate(report_for(), gpu, home=tmp_path).cost_text == "unknown"
