"""The Batch API on a running ``python -m core serve``, through the pinned openai SDK.

One server per module serves the pages and ``/v1`` on one port; the engine tests run the
built-in model through it, as a pipeline that only changed its ``base_url`` would.
"""

from __future__ import annotations

import select
import socket
import time

import httpx
import openai
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.api.keys import ApiAccess, create_key, revoke_key, write_access
from tests.support.api_server import NO_KEY, chats, client_of
from tests.support.browser import StreamlitServer
from tests.support.cli import cli


def test_one_process_serves_the_pages_and_the_api_on_one_port(served):
    assert httpx.get(f"{served.url}/_stcore/health").text == "ok"
    assert "<html" in httpx.get(served.url).text.lower()
    models = client_of(served).models.list()
    assert "SmolLM2-135M-Instruct" in [m.id for m in models]
    listening = {
        c.laddr.port
        for c in psutil.Process(served.process.pid).net_connections()
        if c.status == psutil.CONN_LISTEN
    }
    assert served.port in listening  # `core serve` became the server: one process


def test_the_studios_port_serves_metrics_for_prometheus(served):
    reply = httpx.get(f"{served.url}/metrics")
    assert reply.status_code == 200, reply.text[:200]
    families = {f.name: f for f in text_string_to_metric_families(reply.text)}
    assert families["batch_studio_jobs"].type == "gauge"
    assert families["batch_studio_request_latency_seconds"].type == "histogram"


def _outward_address() -> str | None:
    """An address of this machine that is not loopback (None when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_beyond_loopback_the_api_needs_a_key(studio_home, tmp_path):
    address = _outward_address()
    if address is None:
        pytest.fail("this machine has no address beyond loopback to serve on")
    made = cli("keys", "create", "ops")
    key = made.stdout.strip()
    assert made.returncode == 0 and key.startswith("bs-")
    env = {"BATCH_STUDIO_OPEN": "1"}
    server = StreamlitServer(studio_home, tmp_path, address=address, env=env, serve=True)
    try:
        server.start()
        url = f"http://{address}:{server.port}/v1"
        refused = httpx.get(f"{url}/batches")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="bs-guess", max_retries=0).batches.list()
        ops = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
        assert list(ops.batches.list()) == []
        file = ops.files.create(file=("a.jsonl", chats(1)), purpose="batch")
        assert ops.files.retrieve(file.id).id == file.id
    finally:
        server.stop()


def test_on_loopback_a_key_is_judged_by_that_key_and_a_setting_requires_one(served):
    """Through a tunnel remote traffic arrives from 127.0.0.1: a key it presents that is not
    one in use must not make it this machine's user, who sees every key's files."""
    url = f"{served.url}/v1"
    alice_key, bob_key = (create_key(served.home, f"{n}-loopback") for n in ("alice", "bob"))
    alice, bob = client_of(served, alice_key), client_of(served, bob_key)
    upload = alice.files.create(file=("alice.jsonl", chats(1)), purpose="batch")
    assert upload.id in [f.id for f in client_of(served).files.list()]  # no key: this machine
    assert upload.id not in [f.id for f in bob.files.list()]
    revoke_key(served.home, "bob-loopback")
    for key in ("bs-guess", bob_key, "anything"):
        reply = httpx.get(f"{url}/files", headers={"Authorization": f"Bearer {key}"})
        assert reply.status_code == 401, (key, reply.text)
        assert reply.json()["error"]["code"] == "invalid_api_key"
        assert upload.id not in reply.text
        with pytest.raises(openai.AuthenticationError):
            client_of(served, key).files.retrieve(upload.id)
    poll = httpx.get(f"{url}/batches/batch_none", headers={"Authorization": f"Bearer {bob_key}"})
    assert poll.status_code == 401
    try:
        write_access(served.home, ApiAccess(keys_on_loopback=True))
        refused = httpx.get(f"{url}/files", headers=NO_KEY)
        assert refused.status_code == 401 and "this machine too" in refused.text
        with pytest.raises(openai.AuthenticationError):
            client_of(served).files.list()
        assert [f.id for f in alice.files.list()] == [upload.id]
    finally:
        write_access(served.home, ApiAccess())
    assert upload.id in [f.id for f in client_of(served).files.list()]


@pytest.mark.parametrize("name", ["日本語 данные.jsonl", "résumé.jsonl"])
def test_the_sdk_uploads_a_file_named_outside_ascii_under_its_exact_name(served, name):
    client = client_of(served)
    upload = client.files.create(file=(name, chats(1)), purpose="batch")
    assert upload.filename == name
    assert client.files.retrieve(upload.id).filename == name


def test_an_id_holding_a_slash_or_nul_gets_openais_error_body(served):
    for ident in ("..%2F..%2Fetc%2Fpasswd", "%2F..%2Fx", "%2F", "a%2Fb", "%00", "a%00b"):
        for method, path in (
            ("GET", f"/v1/files/{ident}"),
            ("GET", f"/v1/files/{ident}/content"),
            ("DELETE", f"/v1/files/{ident}"),
            ("GET", f"/v1/batches/{ident}"),
            ("POST", f"/v1/batches/{ident}/cancel"),
        ):
            reply = httpx.request(method, f"{served.url}{path}")
            assert reply.status_code in (400, 404), (path, reply.text)
            error = reply.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}, path
    with pytest.raises(openai.NotFoundError):
        client_of(served).files.retrieve("%00")


def test_a_chunked_json_body_gets_413_before_it_is_all_sent(served):
    """400 MB offered without a length: the server answers once it has read past its cap
    (1 MiB), so the client has sent only a few MB of it, and the server holds none."""
    server = psutil.Process(served.process.pid)
    before = server.memory_info().rss
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b" " * (1 << 16))
    offered = 400 * (1 << 20)
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as conn:
        pending = (
            b"POST /v1/batches HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        sent, answer = 0, b""
        deadline = time.monotonic() + 60
        while b"}}" not in answer and time.monotonic() < deadline:
            readable, writable, _ = select.select([conn], [conn] if pending else [], [], 1)
            if readable:
                more = conn.recv(65536)
                answer += more
                if not more:
                    break
            elif writable:
                try:
                    done = conn.send(pending)
                except (BrokenPipeError, ConnectionResetError):
                    pending = b""
                    continue
                sent, pending = sent + done, pending[done:]
                if not pending and sent < offered:
                    pending = chunk
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"code":"request_too_large"' in answer
    assert sent < 50 * (1 << 20), sent  # refused long before the 400 MB were sent
    assert server.memory_info().rss - before < 100 * (1 << 20)
