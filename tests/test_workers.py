"""The expiry engine with real `celery worker` and `celery beat` processes, real Redis,
real PostgreSQL and the fake Stalwart: many workers, overlapping sweeps, and faults."""
import json
import statistics
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from expiry import services
from expiry.tasks import expire_mailbox
from mailboxes.models import Mailbox
from tests.conftest import ROOT, wait_until
from tests.stalwart_fake import CONCURRENCY, FORBIDDEN_IN_BODY, HTTP_503, RATE_LIMITED

pytestmark = pytest.mark.workers


def make_mailboxes(stalwart, count: int, *, prefix: str, first_in: float, spread: float) -> list[Mailbox]:
    """`count` mailboxes with Stalwart accounts, falling due over `spread` seconds
    starting `first_in` seconds from now."""
    now = timezone.now()
    mailboxes = [
        Mailbox(address=f"{prefix}{i}@relay.localhost",
                expires_at=now + timedelta(seconds=first_in + spread * i / count),
                backend_id=stalwart.add_account(f"{prefix}{i}"))
        for i in range(count)
    ]
    return Mailbox.objects.bulk_create(mailboxes, batch_size=1000)


def settled(ids) -> int:
    return Mailbox.objects.filter(id__in=ids, cleanup_state__in=["done", "dead"]).count()


def wait_settled(ids, timeout: float) -> None:
    wait_until(lambda: settled(ids) == len(ids), timeout=timeout, interval=0.25,
               message=f"{len(ids)} cleanups to finish (done or dead); {settled(ids)} so far")


def assert_each_deprovisioned_once_and_never_early(stalwart, mailboxes) -> None:
    names = stalwart.destroyed_names()
    assert len(names) == len(set(names)), "a mailbox was deprovisioned successfully twice"
    expires = {m.address.split("@")[0]: m.expires_at.timestamp() for m in mailboxes}
    early = [d.name for d in stalwart.destroys if d.at < expires[d.name]]
    assert not early, f"deprovisioned before expires_at: {early[:5]}"


def test_two_worker_processes_given_one_cleanup_deprovision_once(processes, stalwart):
    processes.worker("w1")
    processes.worker("w2")
    processes.wait_ready()
    stalwart.latency = 0.5
    mailbox = Mailbox.objects.create(address="both@relay.localhost", expires_at=timezone.now(),
                                     backend_id=stalwart.add_account("both"))
    services.mailboxes_expire(mailbox_ids=[mailbox.id], enqueue=False)
    for _ in range(2):  # the same message twice, as a redelivery would hand it out
        expire_mailbox.apply_async(args=(str(mailbox.id),))
    wait_settled([mailbox.id], timeout=30)
    wait_until(lambda: "expire_mailbox" in processes.log("w1") + processes.log("w2") and
               (processes.log("w1") + processes.log("w2")).count("succeeded") >= 2, timeout=15,
               message="both messages to be handled")
    assert Mailbox.objects.get(id=mailbox.id).cleanup_state == "done"
    assert len(stalwart.destroy_calls("both")) == 1


def test_many_workers_and_two_beats_clean_up_a_thousand_mailboxes(processes, stalwart):
    for name in ("w1", "w2", "w3"):
        processes.worker(name)
    processes.beat("beat1")
    processes.beat("beat2")
    processes.wait_ready()

    mailboxes = make_mailboxes(stalwart, 1000, prefix="m", first_in=2, spread=5)
    transient = {f"m{i}": (HTTP_503, 2) for i in range(0, 60)}
    transient |= {f"m{i}": (RATE_LIMITED, 1) for i in range(60, 80)}
    transient |= {f"m{i}": (CONCURRENCY, 1) for i in range(80, 100)}
    always = {f"m{i}" for i in range(100, 115)}
    permanent = {f"m{i}" for i in range(115, 125)}
    for name, (kind, times) in transient.items():
        stalwart.fail(kind, name=name, times=times)
    for name in always:
        stalwart.fail(HTTP_503, name=name)
    for name in permanent:
        stalwart.fail(FORBIDDEN_IN_BODY, name=name)

    ids = [m.id for m in mailboxes]
    wait_settled(ids, timeout=150)

    rows = {m.address.split("@")[0]: m for m in Mailbox.objects.filter(id__in=ids)}
    dead = {name for name, m in rows.items() if m.cleanup_state == "dead"}
    assert dead == always | permanent
    assert all(rows[name].cleanup_attempts == 4 and "503" in rows[name].cleanup_last_error for name in always)
    assert all(rows[name].cleanup_attempts == 1 for name in permanent)
    assert all(rows[name].cleanup_attempts == times + 1 for name, (_, times) in transient.items())
    assert_each_deprovisioned_once_and_never_early(stalwart, mailboxes)
    assert sorted(stalwart.destroyed_names()) == sorted(set(rows) - dead)

    # The figure the closing note quotes: expires_at to cleanup done, first-try mailboxes.
    lags = [(m.cleanup_done_at - m.expires_at).total_seconds() for name, m in rows.items()
            if name not in transient and m.cleanup_state == "done"]
    figures = {"mailboxes": len(lags), "median_s": round(statistics.median(lags), 3), "max_s": round(max(lags), 3),
               "workers": 3, "beats": 2, "sweep_interval_s": 1}
    out = Path(ROOT, "var", "expiry-lag-test.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(figures) + "\n")
    print("expiry lag in the many-process test:", figures)


def test_a_worker_killed_mid_run_loses_no_cleanup(processes, stalwart):
    processes.worker("victim")
    processes.worker("survivor")
    processes.beat("beat")
    processes.wait_ready()
    stalwart.latency = 0.05
    mailboxes = make_mailboxes(stalwart, 200, prefix="k", first_in=0.5, spread=1)
    ids = [m.id for m in mailboxes]
    wait_until(lambda: "expire_mailbox" in processes.log("victim") and settled(ids) >= 30, timeout=60,
               message="the victim to be mid-run")
    processes.kill("victim")
    wait_settled(ids, timeout=90)
    assert Mailbox.objects.filter(id__in=ids, cleanup_state="done").count() == 200
    assert_each_deprovisioned_once_and_never_early(stalwart, mailboxes)


def test_a_flushed_broker_loses_no_cleanup(processes, stalwart, broker):
    processes.worker("w1")
    processes.beat("beat")
    processes.wait_ready()
    stalwart.latency = 0.03
    mailboxes = make_mailboxes(stalwart, 200, prefix="f", first_in=0.5, spread=0.5)
    ids = [m.id for m in mailboxes]
    wait_until(lambda: settled(ids) >= 20, timeout=60, message="the run to be under way")
    queued_before = broker.llen("celery")
    broker.flushdb()  # every queued and unacknowledged message is gone
    wait_settled(ids, timeout=90)
    assert queued_before > 0, "the flush should have dropped queued tasks"
    assert Mailbox.objects.filter(id__in=ids, cleanup_state="done").count() == 200
    assert_each_deprovisioned_once_and_never_early(stalwart, mailboxes)
