"""GET /metrics (docs/architecture.md) on a real web process: the gauges match the database after a
known set of changes, the counters of a real worker reach the web process through the
shared multiprocess directory, the cache's staleness is bounded, and a token guards it."""
import urllib.error
import urllib.request

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from mailboxes.lifecycle import mailboxes_expire_due
from mailboxes.models import CleanupState, Mailbox, MailboxStatus
from tests.helpers import make_mailbox, make_operations_scene, wait_until
from tests.stalwart_fake import FORBIDDEN_IN_BODY

pytestmark = pytest.mark.workers


def scrape(port: int, token: str = "") -> dict:
    """The samples of one scrape, keyed by (name, sorted labels)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    text = urllib.request.urlopen(request, timeout=15).read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def uncached_web(processes, **env) -> int:
    """A web process whose /metrics is not cached unless `env` says so; its port."""
    base = processes.start_web(env={"RELAY_METRICS_CACHE_SECONDS": "0", **env}, wait=False)
    processes.wait_ready()
    return int(base.rsplit(":", 1)[1])


def test_the_gauges_match_the_database_after_known_changes(processes):
    expected = make_operations_scene()
    port = uncached_web(processes)
    samples = scrape(port)
    for status in ("active", "expired", "deleted"):
        assert samples[("relay_mailboxes", (("status", status),))] == expected[status] == \
            Mailbox.objects.filter(status=status).count()
    assert samples[("relay_cleanups", (("state", "dead"),))] == expected["dead"]
    assert samples[("relay_cleanups", (("state", "done"),))] == expected["done"]
    assert samples[("relay_cleanups", (("state", "pending"),))] == expected["owed"]
    assert samples[("relay_outbox_mails", (("status", "failed"),))] == expected["failed_mails"]
    assert samples[("relay_webhook_deliveries", (("status", "failed"),))] == expected["dead_deliveries"]
    assert expected["oldest_owed_seconds"] <= samples[("relay_cleanup_oldest_owed_age_seconds", ())] \
        < expected["oldest_owed_seconds"] + 60

    # Known changes: two more active mailboxes, and two of the five active fall due and expire.
    make_mailbox("later1")
    make_mailbox("later2")
    due = Mailbox.objects.filter(address__in=["live0@relay.localhost", "live1@relay.localhost"])
    due.update(expires_at=timezone.now())
    assert len(mailboxes_expire_due(mailbox_ids=[m.id for m in due], announce=False)) == 2
    samples = scrape(port)
    assert samples[("relay_mailboxes", (("status", "active"),))] == 3 == \
        Mailbox.objects.filter(status=MailboxStatus.ACTIVE).count()
    assert samples[("relay_mailboxes", (("status", "expired"),))] == 6
    assert samples[("relay_cleanups", (("state", "pending"),))] == 3 == \
        Mailbox.objects.filter(cleanup_state=CleanupState.PENDING).count()


def test_a_workers_counters_reach_the_web_process(processes, stalwart, tmp_path):
    # One directory for the host's processes, as run.sh and docker-compose set it up.
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    processes.env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    processes.worker("w1", concurrency=2)
    processes.beat("beat")
    port = uncached_web(processes)
    for i in range(5):
        make_mailbox(f"gone{i}", due=True, stalwart=stalwart)
    stalwart.fail(FORBIDDEN_IN_BODY, name="gone4")  # one permanent refusal: a dead letter
    wait_until(lambda: Mailbox.objects.filter(cleanup_state__in=["done", "dead"]).count() == 5, timeout=60,
               message="five cleanups settled")

    def deprovisions() -> dict:
        samples = scrape(port)
        return {outcome: samples.get(("relay_backend_calls_total", (("operation", "deprovision"), ("outcome", outcome))), 0)
                for outcome in ("ok", "permanent")}

    # The worker counts a call just after recording its outcome: poll for the last one.
    wait_until(lambda: deprovisions() == {"ok": 4, "permanent": 1}, timeout=15,
               message=f"the deprovisions counted (last read {deprovisions()})")
    samples = scrape(port)
    runs = samples[("relay_tasks_total", (("outcome", "success"), ("task", "expiry.tasks.expire_mailbox")))]
    assert runs >= 5  # each cleanup once, plus any early or duplicate task that found nothing to do
    assert samples[("relay_tasks_total", (("outcome", "success"), ("task", "expiry.tasks.sweep")))] >= 1
    assert samples[("relay_cleanups", (("state", "dead"),))] == 1
    assert samples[("relay_cleanups", (("state", "done"),))] == 4


def test_the_gauges_are_at_most_the_cache_lifetime_old(processes):
    make_mailbox("first")
    port = uncached_web(processes, RELAY_METRICS_CACHE_SECONDS="2")
    active = lambda: scrape(port)[("relay_mailboxes", (("status", "active"),))]  # noqa: E731
    assert active() == 1
    make_mailbox("second")
    assert active() == 1  # read from the cache, as every scrape within its lifetime is
    wait_until(lambda: active() == 2, timeout=4, interval=0.2, message="the cached gauge to be read again")


def test_a_metrics_token_is_required_when_set(processes):
    port = uncached_web(processes, RELAY_METRICS_TOKEN="scrape-secret")
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape(port)
    assert refused.value.code == 401
    with pytest.raises(urllib.error.HTTPError):
        scrape(port, token="wrong")
    assert ("relay_mailboxes", (("status", "active"),)) in scrape(port, token="scrape-secret")


def test_the_words_owed_gauge_counts_what_the_worker_has_yet_to_write(processes):
    from mailboxes.messages import contents_index_words
    from tests.helpers import deliver

    port = uncached_web(processes)  # and no worker: the words stay owed
    mailbox = make_mailbox("words")
    for n in range(2):
        deliver(f"Subject: note {n}\r\n\r\nsome words\r\n".encode(), mailbox.address)
    assert scrape(port)[("relay_search_words_owed", ())] == 2
    assert contents_index_words() == 2  # as the worker writes them
    assert scrape(port)[("relay_search_words_owed", ())] == 0
