"""A table over a build's limits is refused at once, with a message that says the limit and
how to split the table (issue 38, item 7)."""

from __future__ import annotations

import io
import re
import time
import zipfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.plan.tables import MAX_TABLE_ROWS, TableTooLarge, read_table
from tests.support.cli import cli

TABLE = pd.DataFrame({"ticket_id": range(1, 31), "body": [f"text {i}" for i in range(30)]})


SPLIT = "Split it into files of at most 10 rows"


def xlsx_bytes(table: pd.DataFrame, dimension: bool | str = True) -> bytes:
    """The table as .xlsx; without its recorded size (a ``<dimension>``) when asked, as
    some writers leave it out, or with a false one (``dimension="A1:B2"``)."""
    raw = io.BytesIO()
    table.to_excel(raw, index=False)
    if dimension is True:
        return raw.getvalue()
    recorded = f'<dimension ref="{dimension}"/>'.encode() if dimension else b""
    out = io.BytesIO()
    with zipfile.ZipFile(raw) as source, zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename.startswith("xl/worksheets/"):
                data = re.sub(rb"<dimension [^>]*/>", recorded, data)
            target.writestr(item, data)
    return out.getvalue()


@pytest.mark.parametrize("dimension", [True, False, "A1:B2"])
def test_an_xlsx_over_the_row_limit_is_refused_with_how_to_split(
    dimension: bool | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused from a count of the sheet's rows before a cell is parsed, whatever its
    ``<dimension>`` says: a false ``A1:B2`` over a million rows was once refused only
    after 44.8 s and 517 MB of parsing."""
    data = xlsx_bytes(TABLE, dimension)
    with monkeypatch.context() as parsing:
        parsing.setattr(pd, "read_excel", lambda *a, **k: pytest.fail("the cells were parsed"))
        with pytest.raises(TableTooLarge, match=f"a build reads at most 10. {SPLIT}"):
            read_table(data, "t.xlsx", max_rows=10)
    data = xlsx_bytes(TABLE, dimension)
    with pytest.raises(TableTooLarge, match=f"a build reads at most 10. {SPLIT}"):
        read_table(data, "t.xlsx", max_rows=10)
    table = read_table(data, "t.xlsx", max_rows=30)  # at the limit: read as before
    assert table["ticket_id"].tolist() == list(range(1, 31))
    assert table["body"][29] == "text 29"


def test_an_xlsx_over_the_cell_limit_is_refused_before_its_cells_are_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wide = pd.DataFrame({f"c{i}": range(3) for i in range(10)})  # 40 cells, header included
    data = xlsx_bytes(wide, "A1:B2")
    with monkeypatch.context() as parsing:
        parsing.setattr(pd, "read_excel", lambda *a, **k: pytest.fail("the cells were parsed"))
        with pytest.raises(TableTooLarge, match="more than 39 cells; a build reads at most 39"):
            read_table(data, "t.xlsx", max_cells=39)
    assert read_table(data, "t.xlsx", max_cells=40).equals(wide)


def test_a_parquet_file_over_the_row_limit_is_refused_from_its_footer(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    TABLE.to_parquet(path, row_group_size=7)
    with pytest.raises(TableTooLarge, match=f"the table has 30 rows; .* {SPLIT}"):
        read_table(path, max_rows=10)
    assert read_table(path, max_rows=30).equals(TABLE)
    with pytest.raises(TableTooLarge, match="of cell data or more; a build reads at most 100"):
        read_table(path, max_bytes=100)  # row group by row group, stopping at the budget


def test_a_csv_over_the_limits_is_refused() -> None:
    data = TABLE.to_csv(index=False).encode()
    with pytest.raises(TableTooLarge, match=f"more than 10 rows; .* {SPLIT}"):
        read_table(data, "t.csv", max_rows=10)
    with pytest.raises(TableTooLarge, match="Split it into smaller files"):
        read_table(data, "t.csv", max_bytes=len(data) - 1)
    assert read_table(data, "t.csv", max_rows=30)["body"].tolist() == TABLE["body"].tolist()


def test_cli_build_refuses_a_table_over_a_million_rows_quickly(tmp_path: Path) -> None:
    path = tmp_path / "big.parquet"
    rows = MAX_TABLE_ROWS + 1
    pq.write_table(pa.table({"id": pa.array(range(rows)), "body": pa.array(["x"] * rows)}), path)
    started = time.monotonic()
    result = cli("build", str(path), "--user-template", "{{ body }}", "-o", "out.jsonl")
    assert time.monotonic() - started < 30
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert f"the table has {rows:,} rows; a build reads at most {MAX_TABLE_ROWS:,}" in (
        result.stderr
    )
    assert "Split it into files" in result.stderr
