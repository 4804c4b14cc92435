"""The pages tests of tests/unit/test_table_limits.py (split from it by kind; docs/tests.md).

A table over a build's limits is refused at once, with a message that says the limit and
how to split the table (issue 38, item 7)."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from core.plan.tables import MAX_TABLE_ROWS


def test_the_build_page_refuses_an_upload_over_the_row_limit_with_the_message(
    studio_home: Path,
) -> None:
    from tests.support.pages import open_build_page, shown

    rows = MAX_TABLE_ROWS + 1
    raw = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(range(rows))}), raw)
    at = open_build_page()
    at.radio(key="build_source").set_value("Upload a table").run()
    at.file_uploader[0].upload("big.parquet", raw.getvalue()).run()
    assert not at.exception, [e.message for e in at.exception]
    assert f"the table has {rows:,} rows; a build reads at most {MAX_TABLE_ROWS:,}. Split it" in (
        shown(at.error[0].value)
    )
    assert not at.code  # no preview of a table that was not read
