"""The Results page's vector views in a real browser: headless chromium against
``streamlit run app.py``, on a synthetic embedding job (no engine)."""

from __future__ import annotations

import numpy as np
import pytest
from playwright.sync_api import expect

from tests.support.browser import (
    StreamlitServer,
    expect_no_exception,
    grid_rows,
    metric_value,
    open_page,
    screenshot,
    wait_idle,
)
from tests.support.pages import embedding_job_in_home


@pytest.mark.browser
def test_results_show_an_embedding_jobs_summary_neighbours_and_map(
    studio_server: StreamlitServer, chromium_page
) -> None:
    job = embedding_job_in_home(home=studio_server.home)
    page = chromium_page
    page.goto(studio_server.url)
    open_page(page, "Results")
    expect(page.get_by_role("heading", name="Vectors", exact=True)).to_be_visible()
    norms = np.linalg.norm(job.matrix.astype(np.float64), axis=1)
    expect(metric_value(page, "Vectors")).to_have_text(str(len(job.keys)))
    expect(metric_value(page, "Dimensions")).to_have_text("16")
    expect(metric_value(page, "Norm mean")).to_have_text(f"{norms.mean():.4f}")
    expect(metric_value(page, "Problems")).to_have_text("1")
    screenshot(page, "vectors_1_summary")

    # Similar to the first result on the page (r000): numpy's nearest neighbour first.
    page.get_by_role("tab", name="Similar to this").click()
    wait_idle(page)
    cosine = job.unit @ job.unit[0]
    cosine[0] = -np.inf
    nearest = job.keys[int(np.argmax(cosine))][0]
    expect(page.get_by_text("The 10 inputs most like r000 (itself left out):")).to_be_visible()
    grid = page.get_by_test_id("stDataFrame").filter(has_text="similarity").first
    expect(grid).to_be_visible()
    rows = grid_rows(grid)
    assert rows and rows[0][0] == nearest, rows[:3]
    assert float(rows[0][-2]) == pytest.approx(cosine.max(), abs=1e-5)  # the grid's raw value
    assert rows[0][-1] == job.texts[nearest]  # as text: a markup-like text stays as written
    screenshot(page, "vectors_2_similar")

    # The map: every point drawn (SVG below 5,000 points), texts in the hovers.
    page.get_by_role("tab", name="Map").click()
    wait_idle(page)
    expect(page.get_by_text(f"All {len(job.keys)} vectors.")).to_be_visible()
    plot = page.get_by_test_id("stPlotlyChart").first
    expect(plot).to_be_visible()
    points = plot.locator(".scatterlayer .trace .points path")
    expect(points).to_have_count(len(job.keys))
    screenshot(page, "vectors_3_map")
    expect_no_exception(page)
