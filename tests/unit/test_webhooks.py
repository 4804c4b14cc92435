"""Webhooks (issue 45 item 3): a batch's end is POSTed, signed so that the openai SDK's
``webhooks.unwrap`` accepts it, to a real receiver on 127.0.0.1; retried on a failure,
delivered once, never sent where the job ends."""

from __future__ import annotations

import os
import stat
import time

import pytest
from openai import InvalidWebhookSignatureError, OpenAI

from core.api.batch_view import batch_of
from core.jobs.folder import JobFolder
from core.run import worker
from core.webhooks.outbox import (
    Dispatcher,
    deliver,
    delivery_log,
    dispatcher_lock,
    pending_events,
)
from core.webhooks.registry import (
    OLD_SECRET_SECONDS,
    add_endpoint,
    endpoints_file,
    read_endpoints,
    rotate_secret,
)
from core.webhooks.signing import new_secret
from tests.support.api import own, sdk
from tests.support.cli import cli
from tests.support.jobs import make_job, rewrite_spec
from tests.support.webhooks import closed_port_url, receiver

QUICK = (0.2,)  # seconds between retries in these tests (72 h of them in use)


def unwrap(received, secret: str):
    client = OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
    return client.webhooks.unwrap(received.body, received.headers, secret=secret)


def cancelled_by_the_cli(home) -> JobFolder:
    job = make_job(home, 2, home / "jobs")
    result = cli("cancel", job.job_id)
    assert result.returncode == 0, result.stderr
    assert job.read_status().state == "cancelled"
    return job


def test_a_job_end_is_delivered_once_and_verifies_with_openais_unwrap(studio_home):
    with receiver() as hooks:
        endpoint = add_endpoint(studio_home, hooks.url)
        job = make_job(studio_home, 3, studio_home / "jobs")
        rewrite_spec(job, completion_window_hours=1e-9)  # the worker ends it: expired
        with dispatcher_lock(studio_home) as held:  # as if a dispatcher ran: none starts
            assert held is not None
            assert worker.run_job(job).state == "expired"
            assert hooks.received == []  # the worker only wrote the event down
            [entry] = pending_events(studio_home)
            assert [d.attempts for d in entry.deliveries] == [0]
        job.write_status(job.read_status())  # the same end written again: the same event
        assert len(pending_events(studio_home)) == 1

        assert deliver(studio_home, Dispatcher(studio_home, QUICK), poll=0.05)
        [sent] = hooks.received
        event = unwrap(sent, endpoint.secret)
        assert event.type == "batch.expired" and event.object == "event"
        assert event.data.id == batch_of(job)["id"] == job.job_id
        assert event.id == sent.headers["webhook-id"]
        with pytest.raises(InvalidWebhookSignatureError):
            unwrap(sent, new_secret())

        deliver(studio_home, Dispatcher(studio_home, QUICK), poll=0.05)  # nothing is due
        assert len(hooks.received) == 1  # delivered once
        assert pending_events(studio_home) == []
        [row] = delivery_log(studio_home)
        assert (row["state"], row["batch"], row["attempts"]) == ("delivered", job.job_id, 1)


def test_a_failed_answer_is_retried_and_the_event_delivered_once(studio_home):
    with receiver(500, 200) as hooks, receiver() as other:
        endpoint = add_endpoint(studio_home, hooks.url, ["batch.cancelled"])
        add_endpoint(studio_home, other.url, ["batch.completed"])  # not told of a cancel
        with dispatcher_lock(studio_home):
            job = cancelled_by_the_cli(studio_home)
        assert deliver(studio_home, Dispatcher(studio_home, QUICK), poll=0.05)
        first, second = hooks.received
        assert first.headers["webhook-id"] == second.headers["webhook-id"]
        assert unwrap(second, endpoint.secret).type == "batch.cancelled"
        assert unwrap(second, endpoint.secret).data.id == job.job_id
        assert other.received == []
        [row] = delivery_log(studio_home)
        assert (row["state"], row["attempts"], row["endpoint"]) == ("delivered", 2, hooks.url)


def test_a_dead_endpoint_never_holds_up_the_jobs_end(studio_home):
    add_endpoint(studio_home, closed_port_url())
    with dispatcher_lock(studio_home):
        job = cancelled_by_the_cli(studio_home)  # ended, its state written, nothing sent
        [entry] = pending_events(studio_home)
        assert entry.deliveries[0].attempts == 0
    assert job.read_status().is_final
    dispatcher = Dispatcher(studio_home, delays=(3600,))
    assert dispatcher.step() > time.time() + 3000  # retried in an hour
    [entry] = pending_events(studio_home)
    assert entry.deliveries[0].attempts == 1
    assert "refused" in entry.deliveries[0].last.lower()
    # A failure past the hours allowed (here half an hour) is given up, and logged.
    with dispatcher_lock(studio_home):
        later = cancelled_by_the_cli(studio_home)
    assert Dispatcher(studio_home, delays=(3600,), give_up_after=1800).step() is not None
    states = {row["batch"]: (row["state"], row["last answer"]) for row in delivery_log(studio_home)}
    assert states[job.job_id][0] == "pending"  # its hour has not passed
    assert states[later.job_id][0] == "given up" and "0.5 h" in states[later.job_id][1]
    assert len(pending_events(studio_home)) == 1


def test_a_job_end_starts_a_dispatcher_when_none_runs(studio_home):
    """Only the CLI in use: the cancel's end starts ``core webhooks deliver``, which sends
    the event and leaves when the outbox is empty."""
    with receiver() as hooks:
        endpoint = add_endpoint(studio_home, hooks.url)
        job = cancelled_by_the_cli(studio_home)
        [sent] = hooks.wait_for(1)
        assert unwrap(sent, endpoint.secret).data.id == job.job_id
        deadline = time.monotonic() + 60
        while pending_events(studio_home) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pending_events(studio_home) == []
        while time.monotonic() < deadline:  # the dispatcher leaves: its lock is free
            with dispatcher_lock(studio_home) as held:
                if held is not None:
                    break
            time.sleep(0.1)
        assert held is not None
        assert len(hooks.received) == 1


def test_a_rotated_secret_signs_beside_the_new_one_for_24_hours(studio_home):
    with receiver() as hooks:
        old = add_endpoint(studio_home, hooks.url)
        new = rotate_secret(studio_home, old.id)
        assert new.secret != old.secret
        with dispatcher_lock(studio_home):
            cancelled_by_the_cli(studio_home)
        deliver(studio_home, Dispatcher(studio_home, QUICK), poll=0.05)
        [sent] = hooks.received
        assert unwrap(sent, old.secret).type == unwrap(sent, new.secret).type

        # A rotation 24 h ago: the old secret no longer signs.
        long_ago = time.time() - OLD_SECRET_SECONDS - 1
        newer = rotate_secret(studio_home, old.id, now=long_ago)
        with dispatcher_lock(studio_home):
            cancelled_by_the_cli(studio_home)
        deliver(studio_home, Dispatcher(studio_home, QUICK), poll=0.05)
        later = hooks.received[1]
        assert unwrap(later, newer.secret).type == "batch.cancelled"
        with pytest.raises(InvalidWebhookSignatureError):
            unwrap(later, new.secret)


def test_the_cli_adds_lists_rotates_and_removes_endpoints(studio_home):
    added = cli("webhooks", "add", "http://127.0.0.1:9999/in", "--events", "batch.completed")
    assert added.returncode == 0, added.stderr
    secret = added.stdout.strip()
    assert secret.startswith("whsec_") and "shown only now" in added.stderr
    assert stat.S_IMODE(os.stat(endpoints_file(studio_home)).st_mode) == 0o600
    [endpoint] = read_endpoints(studio_home)
    assert endpoint.secret == secret and endpoint.events == ["batch.completed"]

    listed = cli("webhooks", "list").stdout
    assert endpoint.id in listed and "http://127.0.0.1:9999/in" in listed
    assert secret not in listed

    rotated = cli("webhooks", "rotate", endpoint.id)
    assert rotated.returncode == 0 and rotated.stdout.strip().startswith("whsec_")
    assert rotated.stdout.strip() != secret and "24 h" in rotated.stderr
    assert read_endpoints(studio_home)[0].signing_secrets(time.time())[1] == secret

    bad = cli("webhooks", "add", "ftp://example.com/x")
    assert bad.returncode == 2 and "http:// or https://" in bad.stderr
    unknown = cli("webhooks", "remove", "we_nothing")
    assert unknown.returncode == 2 and "no endpoint 'we_nothing'" in unknown.stderr

    assert cli("webhooks", "remove", "http://127.0.0.1:9999/in").returncode == 0
    assert read_endpoints(studio_home) == []
    assert "no webhook endpoints" in cli("webhooks", "list").stdout


def test_a_batch_cancelled_through_the_api_is_told_with_the_id_the_api_shows(
    studio_home, api, keys
):
    with receiver() as hooks:
        endpoint = add_endpoint(studio_home, hooks.url)
        job = make_job(studio_home, 2, studio_home / "jobs")
        own(job, "alice")
        with dispatcher_lock(studio_home):
            batch = sdk(api, keys["alice"]).batches.cancel(job.job_id)
        assert batch.status == "cancelled"
        deliver(studio_home, Dispatcher(studio_home, QUICK), poll=0.05)
        [sent] = hooks.received
        event = unwrap(sent, endpoint.secret)
        assert (event.type, event.data.id) == ("batch.cancelled", batch.id)
