"""The Batch API in this process: a client, keys, the SDK, batch files and forms, and job
folders in given states. Its fixtures (``api``, ``keys``) are imported into tests/conftest.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from core.api.keys import create_key, read_keys
from core.api.routes import api_routes
from core.config import data_paths
from core.jobs.folder import JobFolder, create_job
from core.schemas import EngineConfig, JobStatus
from tests.support.jobs import request_line


@pytest.fixture
def api(studio_home: Path) -> TestClient:
    with TestClient(Starlette(routes=api_routes()), base_url="http://testserver") as client:
        yield client


@pytest.fixture
def keys(studio_home: Path) -> dict[str, str]:
    home = data_paths().home
    return {name: create_key(home, name) for name in ("alice", "bob")}


def sdk(api: TestClient, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=api)


def batch_file(*lines: str) -> io.BytesIO:
    return io.BytesIO(("\n".join(lines) + "\n").encode())


def chats(count: int) -> io.BytesIO:
    return batch_file(*(request_line(f"r{i}", f"Say {i}", max_tokens=4) for i in range(count)))


def assert_openai_error(reply: httpx.Response, status: int) -> dict:
    """The reply is OpenAI's error body with this status, validated by the SDK's type."""
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == ERROR_FIELDS
    openai.types.ErrorObject.model_validate({**error, "code": error["code"] or ""})
    assert error["message"]
    return error


def _job_with_status(
    home: Path, model: Path, status: JobStatus, output: list[str], errors: list[str]
) -> JobFolder:
    """A job as the CLI makes it (no API), then as its worker would leave it."""
    source = home / "cli.jsonl"
    source.write_text("".join(request_line(f"r{i}", "hi") + "\n" for i in range(3)))
    job = create_job(source, data_paths().jobs, EngineConfig(model=str(model)), name="from the CLI")
    job.write_status(status)
    job.output.write_text("".join(line + "\n" for line in output))
    job.errors.write_text("".join(line + "\n" for line in errors))
    return job


def own(job: JobFolder, name: str) -> None:
    """Makes a job the CLI made the API key ``name``'s, recorded as a batch it created is:
    by the key's id (and its name, shown as the owner)."""
    [key] = [k for k in read_keys(data_paths().home) if k.name == name]
    spec = json.loads(job.spec_file.read_text())
    spec["provenance"].update(owner=name, owner_key=key.identity)
    job.spec_file.write_text(json.dumps(spec))


def _result(custom_id: str, ok: bool) -> str:
    body = {"id": "x", "object": "chat.completion"} if ok else None
    error = None if ok else {"code": "cancelled", "message": "cancelled"}
    return json.dumps(
        {
            "id": f"b_{custom_id}",
            "custom_id": custom_id,
            "response": {"status_code": 200 if ok else 499, "request_id": "r", "body": body},
            "error": error,
        }
    )


def _walk(status: JobStatus, *states: str) -> JobStatus:
    for state in states:
        status.enter(state)
    return status


def form(*parts: tuple[str, str | None, bytes]) -> bytes:
    """A multipart body of ``(name, filename, content)`` parts, boundary ``b0undary``."""
    body = b""
    for name, filename, content in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--b0undary\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        body += content + b"\r\n"
    return body + b"--b0undary--\r\n"


def _ended_batch(home: Path, model: Path, owner: str, expires_seconds: int | None = None):
    """A job the API made for ``owner`` that ended with one success and two failures."""
    stopped = _walk(
        JobStatus(total=3, done=3, succeeded=1, failed=2), "created", "running", "completed"
    )
    job = _job_with_status(
        home, model, stopped, [_result("r0", True)], [_result("r1", False), _result("r2", False)]
    )
    own(job, owner)
    spec = json.loads(job.spec_file.read_text())
    spec["batch"] = {
        "input_file_id": "file-" + "0" * 24,
        "endpoint": "/v1/chat/completions",
        "output_expires_after_seconds": expires_seconds,
    }
    job.spec_file.write_text(json.dumps(spec))
    return job


ERROR_FIELDS = {"message", "type", "param", "code"}
