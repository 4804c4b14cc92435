"""Opening the app's pages with Streamlit's AppTest, and reading what they show."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from core.config import REPO_ROOT, data_paths
from tests.support.jobs import (
    embedding_output_line,
    finished_embedding_job,
    finished_job,
)
from tests.support.results import ROWS
from ui.model_picker import OTHER_FOLDER

APP = REPO_ROOT / "app.py"


TIMEOUT = 60


def open_page(page: str, **state: object) -> AppTest:
    """Runs the app, puts ``state`` into the session, then runs ``pages/<page>``."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    for key, value in state.items():
        at.session_state[key] = value
    at.switch_page(f"pages/{page}").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


@contextmanager
def fragment_reruns(at: AppTest) -> Iterator[None]:
    """Inside it, a run of ``at`` runs the page's fragments only, as a widget in a fragment
    does in the browser (AppTest reruns the whole page). The run's elements are then the
    fragments' alone; an ``st.rerun(scope="app")`` in them still runs the whole page."""
    from streamlit.testing.v1 import local_script_runner as runner

    fragments = list(at._fragment_storage._fragments)  # the ids of the last run's fragments
    assert fragments, "the page has no fragment"
    made = runner.RerunData  # the runner's first request and the run's: both fragments'

    def in_fragments(**fields):
        return made(**fields, fragment_id_queue=fragments)

    runner.RerunData = in_fragments
    try:
        yield
    finally:
        runner.RerunData = made


def shown(markdown: object) -> str:
    """What a person reads of a markdown source: its backslash escapes undone (pages escape
    text from files and models before it reaches a markdown element)."""
    return re.sub(r"\\(.)", r"\1", str(markdown)).replace("\u2060", "")  # joiner: invisible


def open_build_page() -> AppTest:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/build.py").run()
    at.radio(key="build_source").set_value("Use the sample table").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def texts(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [str(e.value) for e in at.error] + [str(w.value) for w in at.warning]
    parts += [str(s.value) for s in at.success] + [str(i.value) for i in at.info]
    return shown("\n".join(parts))


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def job_in_home(home: Path, rows=ROWS, **kw):
    """A finished job placed in the data folder's jobs folder."""
    job = finished_job(home.parent / "build" / kw.pop("name", "one"), rows, **kw)
    target = data_paths().jobs / job.job_id
    job.path.rename(target)
    return target.name


def values(array: list | dict) -> list:
    """A trace's numbers (plotly writes a numeric array as base64 of its dtype)."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), array["dtype"]).tolist()
    return list(array)


def embedding_job_in_home(n: int = 60, home: Path | None = None) -> Job:
    """``n`` single-input requests in three topics (clusters), two planted near copies, a
    request of three inputs, one failed request and one unreadable line; half of the
    vectors written as base64. The job goes into ``home``'s jobs folder (default: the data
    folder's)."""
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((3, DIMS)) * 3
    matrix = (centres[np.arange(n) % 3] + rng.standard_normal((n, DIMS))).astype(np.float32)
    matrix[n - 1] = matrix[4] + rng.normal(0, 0.01, DIMS)  # near copies of rows 4 and 9
    matrix[n - 2] = matrix[9] + rng.normal(0, 0.02, DIMS)
    requests = []
    for i in range(n):
        text = HOSTILE if i == 3 else f"text number {i}"
        requests.append(
            {
                "custom_id": f"r{i:03d}",
                "input": text,
                "vectors": [matrix[i]],
                "metadata": {"topic": "abc"[i % 3], "source_id": str(i)},
                "encoding": "base64" if i % 2 else "float",
            }
        )
    multi = (centres[[0, 1, 2]] + rng.standard_normal((3, DIMS))).astype(np.float32)
    requests.append(
        {
            "custom_id": "multi",
            "input": ["multi one", "multi two", "multi three"],
            "vectors": list(multi),
            "metadata": {"topic": ["a", "b", "c"]},
        }
    )
    requests.append({"custom_id": "failed", "input": "too long", "vectors": None})
    broken = embedding_output_line("broken", ["this is not base64!"])
    requests.append({"custom_id": "broken", "input": "unreadable", "line": broken})
    home = home or data_paths().home
    job = finished_embedding_job(home.parent / "build", requests)
    (home / "jobs").mkdir(parents=True, exist_ok=True)
    job.path.rename(home / "jobs" / job.job_id)
    keys = [(f"r{i:03d}", 0) for i in range(n)] + [("multi", i) for i in range(3)]
    texts = {r["custom_id"]: r["input"] for r in requests}
    return Job(job.job_id, keys, np.vstack([matrix, multi]), texts)


def start_on_page(at, model, key: str = "judge") -> None:
    at.selectbox(key=f"{key}_model").set_value(OTHER_FOLDER).run()
    at.text_input(key=f"{key}_model_path").set_value(str(model)).run()


DIMS = 16


HOSTILE = "<b>bold</b> & <a href='http://example.com/x'>click</a> [link](http://example.com)"


class Job:
    """The job's vectors as numpy sees them: ``keys[i]`` is ``(custom_id, input_index)``
    of ``matrix[i]``, in input order."""

    def __init__(
        self, job_id: str, keys: list[tuple[str, int]], matrix: np.ndarray, texts: dict
    ) -> None:
        self.job_id, self.keys, self.matrix, self.texts = job_id, keys, matrix, texts
        self.unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    def row(self, custom_id: str, index: int = 0) -> int:
        return self.keys.index((custom_id, index))
