"""Expiry burst: N mailboxes due at the same instant, 2 worker processes, PostgreSQL and
Redis. Prints mailboxes cleaned up per second, and its ratio to N no-op Celery tasks on
the same workers in the same run (Celery's own per-task floor).

    scripts/bench.sh expiry_burst [--mailboxes 100000] [--backend local|stalwart|both] [--latency-ms 2]
                                  [--second-burst N]
"""
import argparse
import random
import sys
import time
import uuid
from datetime import timedelta

from bench.common import (celery_worker, command_line, fresh_database, record, rss_mb, setup_django, spawn, stop,
                          wait_until)


def noop_baseline(count: int, broker, *, consume_only: bool = True) -> tuple[float, float | None]:
    """No-op tasks per second on 2 workers, two ways: published from a worker while the
    workers consume (as the sweep publishes expire tasks: the like-for-like floor), and
    consumed from a queue filled beforehand (consumption alone; None without `consume_only`)."""
    from bench.tasks import fan_out, noop
    from config.celery import app

    broker.flushdb()
    workers = [celery_worker(f"noop{i}") for i in range(2)]
    started = time.monotonic()
    fan_out.delay(count)
    wait_until(lambda: broker.get("bench:published") == str(count).encode() and broker.llen("celery") == 0
               and broker.hlen("unacked") == 0, 3600, "the no-op tasks")
    with_publish = count / (time.monotonic() - started)
    stop(*workers)
    if not consume_only:
        return with_publish, None

    broker.flushdb()
    workers = [celery_worker(f"noop{i}", queues="idle") for i in range(2)]
    with app.producer_or_acquire() as producer:
        for _ in range(count):
            noop.apply_async(producer=producer)
    queued = broker.llen("celery")
    assert queued == count, f"expected {count} queued no-op tasks, found {queued}"
    started = time.monotonic()
    app.control.add_consumer("celery", reply=True, destination=[f"noop{i}@{_hostname()}" for i in range(2)])
    wait_until(lambda: broker.llen("celery") == 0 and broker.hlen("unacked") == 0, 3600, "the no-op tasks")
    consume_only = count / (time.monotonic() - started)
    stop(*workers)
    return with_publish, consume_only


def _hostname() -> str:
    import socket

    return socket.gethostname()


def relay_burst(count: int, broker, *, backend: str, latency_ms: float, second: int, env: dict | None = None,
                read_sample: bool = True) -> dict:
    """Cleanups per second for `count` mailboxes already due, swept and cleaned by 2
    workers and a beat, plus RSS of the workers and what API reads show at once. `env`
    goes to the workers and the beat (another broker, say). Without `read_sample` no
    API read is made: a read expires its mailbox in this process, which queues the
    cleanup on this process's broker."""
    from django.db import connection
    from django.utils import timezone
    from rest_framework.test import APIClient

    from mailboxes.models import Mailbox
    from accounts.services import account_create_with_key

    broker.flushdb()
    Mailbox.objects.all().delete()
    owner, key = account_create_with_key(login=f"bench-{uuid.uuid4().hex[:6]}", plan="pro")
    env = {**(env or {}), "RELAY_BACKEND": backend}
    fake = None
    if backend == "stalwart":
        from tests.stalwart_fake import MAIL_SERVER_ID, TOKEN, FakeStalwart

        fake = FakeStalwart(latency=latency_ms / 1000).start()
        env |= {"STALWART_URL": fake.url, "STALWART_TOKEN": TOKEN, "RELAY_AUTHSERV_ID": MAIL_SERVER_ID}
    def create_due(first: int, last: int) -> None:
        due_at = timezone.now() - timedelta(seconds=1)
        batch = []
        for i in range(first, last):
            name = f"b{i}"
            batch.append(Mailbox(owner=owner, address=f"{name}@relay.localhost", expires_at=due_at,
                                 backend_id=fake.add_account(name) if fake else ""))
            if len(batch) == 5000:
                Mailbox.objects.bulk_create(batch)
                batch = []
        Mailbox.objects.bulk_create(batch)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE mailboxes_mailbox")

    create_due(0, count)
    workers = [celery_worker(f"w{i}", env=env) for i in range(2)]
    rss_before = sum(rss_mb(w.pid) for w in workers)
    started = time.monotonic()
    beat = spawn("beat", [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "WARNING",
                          "--pidfile=", "-s", "var/bench/beat-schedule"], env=env)

    # Every API read shows them expired from the first instant: lazy expiry.
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    sample = random.sample(list(Mailbox.objects.values_list("id", flat=True)), 200) if read_sample else []
    shown = [client.get(f"/api/v1/mailboxes/{mailbox_id}").json()["status"] for mailbox_id in sample]
    expired_at_once = shown.count("expired") / len(shown) if shown else float("nan")

    done = lambda: Mailbox.objects.filter(cleanup_state="done").count()  # noqa: E731
    wait_until(lambda: done() == count, 7200, "every cleanup to finish", interval=0.5)
    elapsed = time.monotonic() - started
    rss_after = sum(rss_mb(w.pid) for w in workers)
    # A second burst of the same size on the same workers: memory that grows with the
    # work done would grow again by as much; a warmed-up plateau would not.
    if second:
        create_due(count, count + second)
        wait_until(lambda: done() == count + second, 7200, "the second burst", interval=0.5)
    rss_second = sum(rss_mb(w.pid) for w in workers)
    stop(beat, *workers)
    if fake:
        assert len(fake.destroys) == count + second
        fake.stop()
    return {
        "per_second": count / elapsed,
        "expired_at_once": expired_at_once,
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_after,
        "rss_second_mb": rss_second,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mailboxes", type=int, default=100_000)
    parser.add_argument("--backend", choices=["local", "stalwart", "both"], default="both")
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--second-burst", type=int, default=None,
                        help="mailboxes in a second burst on the same workers, to tell warm-up from growth "
                             "(default: as many as the first; 0: none)")
    args = parser.parse_args()

    fresh_database()
    setup_django()
    import redis
    from django.conf import settings

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    baseline, consume_only = noop_baseline(args.mailboxes, broker)
    print(f"no-op Celery tasks: {baseline:.0f}/s published and consumed, {consume_only:.0f}/s consumed only")
    backends = ["local", "stalwart"] if args.backend == "both" else [args.backend]
    for backend in backends:
        second = args.mailboxes if args.second_burst is None else args.second_burst
        result = relay_burst(args.mailboxes, broker, backend=backend, latency_ms=args.latency_ms, second=second)
        ratio = result["per_second"] / baseline
        label = backend if backend == "local" else f"stalwart ({args.latency_ms:g} ms/call)"
        figures = (f"{label}: {args.mailboxes:,} mailboxes, {result['per_second']:.0f} cleaned/s vs "
                   f"{baseline:.0f} no-op tasks/s published and consumed = ratio **{ratio:.2f}** "
                   f"({result['per_second'] / consume_only:.2f} vs {consume_only:.0f}/s consumed only); "
                   f"API reads showing expired at t=0: "
                   f"{result['expired_at_once']:.0%}; worker RSS {result['rss_before_mb']:.0f} → "
                   f"{result['rss_after_mb']:.0f} MiB after the burst"
                   + (f" → {result['rss_second_mb']:.0f} MiB after a second of {second:,}" if second else ""))
        record("expiry_burst", command_line(), figures)


if __name__ == "__main__":
    main()
