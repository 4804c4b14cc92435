"""What the Batch API refuses, and how: bodies over the cap, deep or mistyped JSON, cut or
unstorable uploads, and file names outside ASCII kept exactly (issue 38, items 6 and 8).

In this process, as tests/unit/test_api.py (a caller not on loopback, so with a key);
tests/unit/test_api_server.py sends the same through a running server.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import openai
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from core.api import files
from core.api.keys import create_key
from core.api.routes import JSON_BODY_MAX, api_routes
from core.config import data_paths
from tests.support.api import assert_openai_error, chats, form, sdk

MULTIPART = "multipart/form-data; boundary=b0undary"


@pytest.fixture
def api(studio_home: Path) -> Iterator[TestClient]:
    with TestClient(Starlette(routes=api_routes()), base_url="http://testserver") as client:
        yield client


@pytest.fixture
def keys(studio_home: Path) -> dict[str, str]:
    return {"alice": create_key(data_paths().home, "alice")}


def stored() -> list[str]:
    folder = data_paths().home / "files"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def create(client: openai.OpenAI, **changes) -> openai.types.Batch:
    file_id = client.files.create(file=("a.jsonl", chats(1)), purpose="batch").id
    request = {
        "input_file_id": file_id,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    return client.batches.create(**{**request, **changes})


def test_a_json_body_over_the_cap_gets_413_and_the_sdk_does_not_retry(api, keys, no_worker):
    client = sdk(api, keys["alice"])
    seen: list[int] = []
    api.event_hooks["response"].append(lambda reply: seen.append(reply.status_code))
    with pytest.raises(openai.APIStatusError) as refused:
        create(client, extra_body={"padding": "x" * (JSON_BODY_MAX + 1)})
    assert refused.value.status_code == 413
    assert refused.value.code == "request_too_large"
    assert f"{JSON_BODY_MAX:,} bytes" in refused.value.message
    assert seen[-1:] == [413] and seen.count(413) == 1  # asked once, not three times
    assert list(client.batches.list()) == []
    # Under the cap, the same request makes its batch.
    assert create(client, extra_body={"padding": "x" * 1000}).status == "validating"


def test_a_chunked_json_body_is_refused_once_it_passes_the_cap(api, keys):
    """A body with no Content-Length is counted as it is read."""
    auth = {"Authorization": f"Bearer {keys['alice']}"}

    def chunks():
        for _ in range(4):
            yield b" " * (JSON_BODY_MAX // 2)
        yield b"{}"

    reply = api.post("/v1/batches", content=chunks(), headers=auth)
    assert "content-length" not in reply.request.headers
    assert assert_openai_error(reply, 413)["code"] == "request_too_large"


def test_deep_or_mistyped_json_gets_a_400_naming_what_is_wrong(api, keys, no_worker):
    auth = {"Authorization": f"Bearer {keys['alice']}"}
    deep = b'{"input_file_id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    error = assert_openai_error(api.post("/v1/batches", content=deep, headers=auth), 400)
    assert "nests more than 64" in error["message"]
    client = sdk(api, keys["alice"])
    for window in (["24h"], {"24h": 1}, 24):
        with pytest.raises(openai.BadRequestError) as refused:
            create(client, completion_window=window)
        assert refused.value.param == "completion_window"
        assert "'24h'" in refused.value.message
    assert list(client.batches.list()) == []


@pytest.mark.parametrize("name", ["日本語 данные.jsonl", "résumé.jsonl"])
def test_a_file_name_outside_ascii_is_kept_exactly(api, keys, no_worker, name):
    """The SDK sends the name's UTF-8 bytes in ``filename="..."`` (what httpx does)."""
    client = sdk(api, keys["alice"])
    upload = client.files.create(file=(name, chats(2)), purpose="batch")
    assert upload.filename == name
    assert client.files.retrieve(upload.id).filename == name
    assert [f.filename for f in client.files.list()] == [name]
    batch = create(client, input_file_id=upload.id)  # a batch made from it
    assert f'"source": "{name}"' in (data_paths().jobs / batch.id / "job.json").read_text(
        encoding="utf-8"
    )


def test_an_rfc_5987_file_name_wins_over_the_plain_one(api, keys):
    auth = {"Authorization": f"Bearer {keys['alice']}", "Content-Type": MULTIPART}
    name = "日本語 данные.jsonl"
    disposition = (
        f'form-data; name="file"; filename="fallback.jsonl"; filename*=UTF-8\'\'{quote(name)}'
    )
    body = (
        form(("purpose", None, b"batch")).replace(b"--b0undary--\r\n", b"")
        + f"--b0undary\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        + chats(1).getvalue()
        + b"\r\n--b0undary--\r\n"
    )
    reply = api.post("/v1/files", content=body, headers=auth)
    assert reply.status_code == 200, reply.text
    assert reply.json()["filename"] == name


def test_an_upload_cut_before_its_closing_boundary_is_refused_and_not_kept(api, keys):
    auth = {"Authorization": f"Bearer {keys['alice']}", "Content-Type": MULTIPART}
    whole = form(("purpose", None, b"batch"), ("file", "a.jsonl", chats(20).getvalue()))
    for cut in (whole[: whole.index(b"--b0undary--")], whole[: len(whole) // 2]):
        error = assert_openai_error(api.post("/v1/files", content=cut, headers=auth), 400)
        assert "cut short" in error["message"] and error["param"] == "file"
    assert stored() == []
    assert api.post("/v1/files", content=whole, headers=auth).status_code == 200


@contextmanager
def full_after(limit: int, monkeypatch: pytest.MonkeyPatch):
    """A disk that fills after ``limit`` bytes of an upload's content (and so the record
    after it too, once ``limit`` is 0); yields the count of writes tried."""
    real = files.file_atomic
    tried = []

    @contextmanager
    def filling(path: Path):
        with real(path) as out:
            write, written = out.write, [0]

            def write_until_full(data: bytes) -> int:
                tried.append(len(data))
                written[0] += len(data)
                if written[0] > limit:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return write(data)

            out.write = write_until_full
            yield out

    monkeypatch.setattr(files, "file_atomic", filling)
    yield tried


def test_a_full_disk_on_upload_gets_507_once_and_leaves_nothing(api, keys, monkeypatch):
    client = sdk(api, keys["alice"])
    with (
        full_after(1000, monkeypatch) as tried,
        pytest.raises(openai.InternalServerError) as refused,
    ):
        client.files.create(file=("big.jsonl", chats(50)), purpose="batch")
    assert refused.value.status_code == 507
    assert refused.value.code == "insufficient_storage"
    assert "disk is full" in refused.value.message
    assert sum(tried) < 2 * len(chats(50).getvalue())  # sent once: no retry
    assert stored() == []
    assert list(client.files.list()) == []


def test_a_full_disk_when_the_record_is_written_leaves_no_content(api, keys, monkeypatch):
    client = sdk(api, keys["alice"])

    def no_room(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "write_atomic", no_room)
    with pytest.raises(openai.InternalServerError) as refused:
        client.files.create(file=("a.jsonl", chats(2)), purpose="batch")
    assert refused.value.status_code == 507
    assert stored() == []


def _copy_cut_at_4096(source: Path, target: Path) -> None:
    target.write_bytes(source.read_bytes()[:4096])
    raise OSError(errno.ENOSPC, "No space left on device")


def _no_room(path: Path, text: str) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    ("where", "full"),
    [("shutil.copyfile", _copy_cut_at_4096), ("write_atomic", _no_room)],
    ids=["input copy", "job.json"],
)
def test_a_full_disk_on_batch_create_gets_507_and_keeps_no_job(
    api, keys, no_worker, monkeypatch, where, full
):
    """It once answered 500 and left a job folder with a cut input.jsonl and no job.json."""
    client = sdk(api, keys["alice"])
    file_id = client.files.create(file=("big.jsonl", chats(200)), purpose="batch").id
    monkeypatch.setattr(f"core.jobs.folder.{where}", full)
    with pytest.raises(openai.InternalServerError) as refused:
        client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert refused.value.status_code == 507
    assert refused.value.code == "insufficient_storage"
    assert "disk is full: the batch was not created" in refused.value.message
    assert list(data_paths().jobs.glob("job_*")) == []
    assert list(client.batches.list()) == [] and no_worker == []


def test_a_form_padded_past_the_limit_outside_its_file_is_refused(api, keys, monkeypatch):
    """The whole form is counted as it streams, not only its file part."""
    monkeypatch.setenv("BATCH_STUDIO_API_MAX_UPLOAD_MB", "0.01")  # 10,000 bytes
    auth = {"Authorization": f"Bearer {keys['alice']}", "Content-Type": MULTIPART}
    padded = form(
        ("padding", None, b"x" * 1_100_000),
        ("purpose", None, b"batch"),
        ("file", "a.jsonl", chats(1).getvalue()),
    )

    def chunks():  # no Content-Length: only counting can tell
        for start in range(0, len(padded), 1 << 16):
            yield padded[start : start + (1 << 16)]

    reply = api.post("/v1/files", content=chunks(), headers=auth)
    assert assert_openai_error(reply, 400)["code"] == "file_too_large"
    assert stored() == []
