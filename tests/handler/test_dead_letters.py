"""Dead letters pushed, on the Firestore and Pub/Sub emulators: one per final failure.

A run that ends failed for good is published by its delivery; one whose handler
died before the publish (here: a topic Pub/Sub refused then) by the audit that
finds it `failed`; a run the audit finds `released` once Scheduler's retries are
over, as `retries_exhausted`. Every message carries the `dead_letter_id`
consumers dedupe on, and the run notes it, so a later look publishes nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import pytest

from runledger.delivery.dead_letter import dead_letter_id
from runledger.delivery.identify import run_key
from runledger.exceptions import ConfigError, StoreUnavailable, TerminalJobError
from runledger.ledger.epochs import record_epochs
from runledger.ledger.record import Status
from runledger.ops.cli import main
from runledger.schedules import audit_settings
from runledger.sdk.context import RunContext
from tests.handler.support import (
    LEASE,
    RETENTION,
    T0,
    deliver,
    make_app,
    scheduler_headers,
    settings,
)
from tests.handler.test_audit import DEPLOYED, SCOPE, SETTLE, move_to, schedules, stamp
from tests.handler.test_audit_watermark import audit_delivery

PROJECT = "demo-dedup"  # the emulators' project
TOPIC = f"projects/{PROJECT}/topics/scheduler-dead-letters"
SUBSCRIPTION = f"projects/{PROJECT}/subscriptions/on-call"
WHEN = T0.replace(hour=9)
RAW = schedules({"id": "export", "schedule": "0 * * * *"})
# The tests' own pulls ask the emulator to answer at once, a flag the client calls deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated")


@pytest.fixture
def topic(pubsub_emulator):
    """An empty topic with one pull subscription, made anew for each test."""
    from google.api_core.exceptions import NotFound
    from google.cloud import pubsub_v1

    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    with contextlib.suppress(NotFound):  # absent the first time
        subscriber.delete_subscription(request={"subscription": SUBSCRIPTION})
    with contextlib.suppress(NotFound):
        publisher.delete_topic(request={"topic": TOPIC})

    def create() -> None:
        publisher.create_topic(request={"name": TOPIC})
        subscriber.create_subscription(request={"name": SUBSCRIPTION, "topic": TOPIC})

    return create


def pulled() -> list[tuple[dict[str, str], dict[str, Any]]]:
    """Every message the subscription holds now: (attributes, body), acknowledged."""
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    messages: list[tuple[dict[str, str], dict[str, Any]]] = []
    quiet = 0
    while quiet < 3:  # the emulator may answer a pull empty while messages wait
        # return_immediately: answer now, empty or not (a plain pull waits for a message).
        request = {"subscription": SUBSCRIPTION, "max_messages": 50, "return_immediately": True}
        answer = subscriber.pull(request=request, timeout=60)
        if not answer.received_messages:
            quiet += 1
            time.sleep(0.3)
            continue
        for received in answer.received_messages:
            body = json.loads(received.message.data)
            messages.append((dict(received.message.attributes), body))
        subscriber.acknowledge(
            request={
                "subscription": SUBSCRIPTION,
                "ack_ids": [item.ack_id for item in answer.received_messages],
            }
        )
    return messages


def failing(ctx: RunContext) -> None:
    raise TerminalJobError("partner API rejected the batch")


def flaky(ctx: RunContext) -> None:
    raise RuntimeError("partner API timed out")


def app_on(store, clock, job, **extra: str):
    config = audit_settings({"DEDUP_SCHEDULES": RAW} | SCOPE, settings(**SCOPE))
    record_epochs(store, config.project, config.region, config.schedules, DEPLOYED)
    env = SCOPE | {"DEDUP_DEAD_LETTER_TOPIC": TOPIC} | extra
    return make_app(store, {"export": job}, clock, audit=config, **env)


def key() -> str:
    return run_key("export", WHEN, "acme-prod", "europe-west1", manual=False)


def test_a_run_that_fails_for_good_is_published_once_with_its_id(
    firestore_store, firestore_emulator, topic, clock, capsys
):
    topic()
    move_to(clock, WHEN + timedelta(seconds=5))
    app = app_on(firestore_store, clock, failing)
    capsys.readouterr()
    answer = deliver(app, scheduler_headers(job="export", schedule_time=stamp(WHEN)))
    assert (answer.status, answer.outcome) == (422, "failed_terminal")
    out = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    (line,) = [entry for entry in out if entry.get("outcome") == "failed_terminal"]
    assert line["dead_letter"] == "dead_letter_published"
    record = firestore_store.get(key()).record
    letter = dead_letter_id(key(), record.attempt_id, "failed_terminal")
    assert record.dead_letter_id == letter and record.dead_lettered_at is not None

    # A Scheduler retry of the failed run, and the audit that finds it failed: nothing more.
    again = deliver(app, scheduler_headers(job="export", schedule_time=stamp(WHEN)))
    assert again.outcome == "duplicate_failed"
    move_to(clock, WHEN + SETTLE + timedelta(minutes=1))
    lines = audit_delivery(app, clock, capsys)
    assert [line["outcome"] for line in lines if line.get("schedule_time") == stamp(WHEN)] == [
        "run_failed"
    ]
    ((attributes, body),) = pulled()
    assert attributes == {
        "dead_letter_id": letter,
        "kind": "failed_terminal",
        "job": "export",
        "run_key": key(),
    }
    assert {k: body[k] for k in ("job", "schedule_time", "run_key", "attempts", "error")} == {
        "job": "export",
        "schedule_time": WHEN.isoformat(),
        "run_key": key(),
        "attempts": 1,
        "error": "TerminalJobError: partner API rejected the batch",
    }
    assert body["trigger"] == "scheduled" and body["dead_letter_id"] == letter
    assert body["links"]["logs"].startswith("https://console.cloud.google.com/logs/query;query=")
    scheduler_link = body["links"]["scheduler_job"]
    assert "cloudscheduler/jobs/edit/europe-west1/export?project=acme-prod" in scheduler_link
    # `ops describe` names the topic and the time whose letter went out.
    env = (
        firestore_emulator.env()
        | SCOPE
        | {
            "DEDUP_SCHEDULES": RAW,
            "DEDUP_DEAD_LETTER_TOPIC": TOPIC,
            "DEDUP_LEASE_SECONDS": str(int(LEASE.total_seconds())),
            "DEDUP_RETENTION_SECONDS": str(int(RETENTION.total_seconds())),
        }
    )
    out, err = io.StringIO(), io.StringIO()
    code = main(["describe", "--job", "export", "--json"], env=env, clock=clock, stdout=out,
                stderr=err)  # fmt: skip
    assert code == 0, err.getvalue()
    view = json.loads(out.getvalue())
    assert view["dead_letter_topic"] == TOPIC
    letters = {item["schedule_time"]: item["dead_letter"] for item in view["recent"]}
    assert letters[stamp(WHEN)] == letter


def test_a_failure_whose_publish_did_not_happen_is_published_by_the_audit(
    firestore_store, topic, clock, capsys
):
    move_to(clock, WHEN + timedelta(seconds=5))
    app = app_on(firestore_store, clock, failing)
    capsys.readouterr()
    # No topic yet: Pub/Sub refuses the publish (as it would a crash before it, the run
    # is failed and carries no note).
    deliver(app, scheduler_headers(job="export", schedule_time=stamp(WHEN)))
    out = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    (refused,) = [line for line in out if line.get("outcome") == "dead_letter_unpublished"]
    assert refused["severity"] == "ERROR" and "NotFound" in refused["error"]
    assert firestore_store.get(key()).record.dead_letter_id is None

    topic()
    move_to(clock, WHEN + SETTLE + timedelta(minutes=1))
    lines = audit_delivery(app, clock, capsys)
    assert [line["outcome"] for line in lines if "dead_letter" in line["outcome"]] == [
        "dead_letter_published"
    ]
    ((attributes, body),) = pulled()
    assert attributes["kind"] == "failed_terminal" and body["run_key"] == key()
    assert firestore_store.get(key()).record.dead_letter_id == attributes["dead_letter_id"]


def test_retries_exhausted_are_published_by_the_audit_once(firestore_store, topic, clock, capsys):
    topic()
    move_to(clock, WHEN + timedelta(seconds=5))
    app = app_on(firestore_store, clock, flaky)
    answer = deliver(app, scheduler_headers(job="export", schedule_time=stamp(WHEN)))
    assert answer.outcome == "failed_retryable"
    assert pulled() == []  # a retryable failure is not final: Scheduler retries it
    move_to(clock, WHEN + SETTLE + timedelta(minutes=1))
    audit_delivery(app, clock, capsys)
    ((attributes, body),) = pulled()
    record = firestore_store.get(key()).record
    assert record.status is Status.RELEASED
    assert attributes["kind"] == "retries_exhausted"
    assert attributes["dead_letter_id"] == dead_letter_id(
        key(), record.attempt_id, "retries_exhausted"
    )
    assert body["error"] == "RuntimeError: partner API timed out"
    clock.advance(seconds=600)
    audit_delivery(app, clock, capsys)
    assert pulled() == []


@pytest.mark.parametrize(
    "value", ["scheduler-dead-letters", "projects/acme-prod/topics/goog-letters", "projects/x/t"]
)
def test_a_topic_that_is_no_topic_name_stops_the_handler_in_one_line(value):
    with pytest.raises(ConfigError) as caught:
        settings(DEDUP_DEAD_LETTER_TOPIC=value)
    assert str(caught.value).startswith("DEDUP_DEAD_LETTER_TOPIC: ")
    assert "\n" not in str(caught.value)


def test_a_delivery_that_succeeds_never_imports_the_pubsub_client():
    script = f"""
import sys
from runledger.ledger.memory_store import MemoryRunStore
from runledger.service.app import App
from runledger.config import Settings
from runledger.delivery.identify import scheduler_headers
env = {{"DEDUP_DEAD_LETTER_TOPIC": "{TOPIC}", "DEDUP_CONTRACT_VERSION": "1"}}
app = App(Settings.from_env(env), {{"export": lambda ctx: None}}, MemoryRunStore,
          dead_letters=__import__("runledger.service.app", fromlist=["x"]).dead_letters(
              Settings.from_env(env), None))
import datetime
when = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
answer = app.handle("POST", scheduler_headers("export", when, "p-1234", "r1"), b"")
assert answer.outcome == "completed", answer
print("google.cloud.pubsub_v1" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "False"


class AnswerLostOnFailure:
    """The emulator's store, but the answer to the run's `failed` write is lost: the write
    lands, the handler is told the store was unavailable."""

    def __init__(self, store) -> None:
        self._store = store

    def __getattr__(self, name: str):
        return getattr(self._store, name)

    def update(self, key: str, changes, version):
        written = self._store.update(key, changes, version)
        if changes.get("status") == Status.FAILED.value:
            raise StoreUnavailable("deadline exceeded (the write landed)")
        return written


def test_a_failure_whose_write_lost_its_answer_is_published_by_schedulers_retry(
    firestore_store, topic, clock, capsys
):
    topic()
    move_to(clock, WHEN + timedelta(seconds=5))
    app = app_on(AnswerLostOnFailure(firestore_store), clock, failing)
    answer = deliver(app, scheduler_headers(job="export", schedule_time=stamp(WHEN)))
    assert answer.status == 503  # Scheduler retries it
    assert firestore_store.get(key()).record.status is Status.FAILED
    assert pulled() == []

    capsys.readouterr()
    again = deliver(app, scheduler_headers(job="export", schedule_time=stamp(WHEN)))

    assert again.outcome == "duplicate_failed"
    out = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    (line,) = [entry for entry in out if entry.get("outcome") == "duplicate_failed"]
    assert line["dead_letter"] == "dead_letter_published"
    ((attributes, _),) = pulled()
    record = firestore_store.get(key()).record
    assert attributes["dead_letter_id"] == record.dead_letter_id
    assert attributes["dead_letter_id"] == dead_letter_id(
        key(), record.attempt_id, "failed_terminal"
    )
    # A third delivery finds the note: nothing more.
    deliver(app, scheduler_headers(job="export", schedule_time=stamp(WHEN)))
    assert pulled() == []
