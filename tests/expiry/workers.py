"""The expiry engine with real `celery worker` and `celery beat` processes, real
PostgreSQL and the fake Stalwart: many workers, overlapping sweeps, and faults. Every
test here runs on both brokers Relay supports in production, each in a file of its own
that gives its `on_broker` fixture: Redis (test_workers_redis.py), and RabbitMQ
(test_workers_rabbitmq.py; there is no Redis at all: the cache, the backend limiter and
waiters fall back to the database, as they do in a Redis-free deployment). Two files, so
that `--dist loadfile` can run them on both cores at once: the Redis ones use the xdist
worker's own Redis, while the RabbitMQ ones share the machine's server and stay together.
This module is not collected itself (its name does not start with test_)."""
import shutil
import statistics
import subprocess

import kombu
import pytest

from expiry.tasks import expire_mailbox
from mailboxes.lifecycle import mailboxes_expire_due
from mailboxes.models import Mailbox
from tests.helpers import make_mailbox, make_mailboxes, wait_until
from tests.stalwart_fake import CONCURRENCY, FORBIDDEN_IN_BODY, HTTP_503, RATE_LIMITED

RABBITMQ = "amqp://guest:guest@127.0.0.1:5672//"
QUEUES = ("celery", "sweep")


def rabbitmq_answers() -> bool:
    try:
        with kombu.Connection(RABBITMQ, connect_timeout=2) as connection:
            connection.ensure_connection(max_retries=1)
        return True
    except Exception:
        return False


class RedisBroker:
    name = "redis"

    def __init__(self, client, processes) -> None:
        self.client = client

    def send(self, task, args) -> None:
        task.apply_async(args=args)

    def lose_everything(self) -> int:
        """Flush the broker: every queued message and every one a worker holds
        unacknowledged (tasks scheduled ahead wait in a worker, unacked, until their
        time) is gone. Returns how many there were."""
        held = self.client.llen("celery") + self.client.hlen("unacked")
        self.client.flushdb()
        return held


class RabbitBroker:
    name = "rabbitmq"

    def __init__(self, client, processes) -> None:
        processes.env["CELERY_BROKER_URL"] = RABBITMQ
        # No Redis anywhere: CACHE_URL unset makes the cache a database table.
        processes.env.pop("CACHE_URL", None)
        with kombu.Connection(RABBITMQ, connect_timeout=5) as connection, connection.channel() as channel:
            for queue in QUEUES:  # nothing from an earlier run
                try:
                    channel.queue_purge(queue)
                except connection.channel_errors:
                    pass

    def send(self, task, args) -> None:
        with kombu.Connection(RABBITMQ, connect_timeout=5) as connection:
            task.apply_async(args=args, connection=connection)

    def lose_everything(self) -> int:
        """Restart RabbitMQ and empty its queues before the workers are back: what was
        queued, and what workers held unacknowledged (returned to the queue when their
        connections closed), is gone. Returns how many messages there were."""
        if not shutil.which("rabbitmqctl"):
            pytest.skip("restarting RabbitMQ needs rabbitmqctl")
        held = sum(int(line.split()[1]) for line in _rabbitmqctl("list_queues", "-q", "name", "messages").splitlines()
                   if line.split() and line.split()[0] in QUEUES)
        _rabbitmqctl("stop_app")
        _rabbitmqctl("start_app")
        for queue in QUEUES:
            _rabbitmqctl("purge_queue", queue)
        return held


def _rabbitmqctl(*args: str) -> str:
    return subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, text=True, timeout=60).stdout


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


def test_two_worker_processes_given_one_cleanup_deprovision_once(processes, stalwart, on_broker):
    processes.worker("w1")
    processes.worker("w2")
    processes.wait_ready()
    stalwart.latency = 0.5
    mailbox = make_mailbox("both", due=True, stalwart=stalwart)
    mailboxes_expire_due(mailbox_ids=[mailbox.id], announce=False)
    for _ in range(2):  # the same message twice, as a redelivery would hand it out
        on_broker.send(expire_mailbox, (str(mailbox.id),))
    wait_settled([mailbox.id], timeout=30)
    wait_until(lambda: "expire_mailbox" in processes.log("w1") + processes.log("w2") and
               (processes.log("w1") + processes.log("w2")).count("succeeded") >= 2, timeout=15,
               message="both messages to be handled")
    assert Mailbox.objects.get(id=mailbox.id).cleanup_state == "done"
    assert len(stalwart.destroy_calls("both")) == 1


def test_many_workers_and_two_beats_clean_up_a_thousand_mailboxes_promptly(processes, stalwart, on_broker):
    for name in ("w1", "w2", "w3"):
        processes.worker(name)
    processes.beat("beat1")
    processes.beat("beat2")
    processes.wait_ready()

    mailboxes = make_mailboxes(1000, prefix="m", first_in=2, spread=5, stalwart=stalwart)
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
    attempts = {name: (rows[name].cleanup_attempts, times + 1) for name, (_, times) in transient.items()}
    assert all(made == expected for made, expected in attempts.values()), {
        name: (made, expected, rows[name].cleanup_last_error) for name, (made, expected) in attempts.items()
        if made != expected}
    assert_each_deprovisioned_once_and_never_early(stalwart, mailboxes)
    assert sorted(stalwart.destroyed_names()) == sorted(set(rows) - dead)

    # How soon after expires_at they were cleaned up is the machine's hour as much as
    # Relay's: bench/expiry_lag.py measures it (docs/benchmarks.md). Here it is only shown;
    # a sweep that stalled or lost work fails wait_settled above.
    lags = [(m.cleanup_done_at - m.expires_at).total_seconds() for name, m in rows.items()
            if name not in transient and m.cleanup_state == "done"]
    print(f"expires_at to done over {len(lags)} first-try mailboxes: median {statistics.median(lags):.2f} s, "
          f"max {max(lags):.2f} s")
    # The sweep reads its queue's length on either broker (an empty queue reads 0).
    logs = "".join(processes.log(name) for name in ("w1", "w2", "w3"))
    assert "could not read the length" not in logs


def test_a_worker_killed_mid_run_loses_no_cleanup(processes, stalwart, on_broker):
    processes.worker("victim")
    processes.worker("survivor")
    processes.beat("beat")
    processes.wait_ready()
    stalwart.latency = 0.05
    mailboxes = make_mailboxes(200, prefix="k", first_in=0.5, spread=1, stalwart=stalwart)
    ids = [m.id for m in mailboxes]
    wait_until(lambda: "expire_mailbox" in processes.log("victim") and settled(ids) >= 30, timeout=60,
               message="the victim to be mid-run")
    processes.kill("victim")
    wait_settled(ids, timeout=90)
    assert Mailbox.objects.filter(id__in=ids, cleanup_state="done").count() == 200
    assert_each_deprovisioned_once_and_never_early(stalwart, mailboxes)


def test_a_broker_that_loses_every_message_loses_no_cleanup(processes, stalwart, on_broker):
    processes.worker("w1")
    processes.beat("beat")
    processes.wait_ready()
    stalwart.latency = 0.03
    mailboxes = make_mailboxes(200, prefix="f", first_in=0.5, spread=0.5, stalwart=stalwart)
    ids = [m.id for m in mailboxes]
    wait_until(lambda: settled(ids) >= 20, timeout=60, message="the run to be under way")
    held = on_broker.lose_everything()
    wait_settled(ids, timeout=90)
    assert held > 0, "the broker should have held messages when it lost them"
    assert Mailbox.objects.filter(id__in=ids, cleanup_state="done").count() == 200
    assert_each_deprovisioned_once_and_never_early(stalwart, mailboxes)
    if on_broker.name == "rabbitmq":
        assert processes.log("w1").count("Connected to amqp://") >= 2, "the worker should have reconnected"
