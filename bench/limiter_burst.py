"""Backend-limited burst (docs/architecture.md): N mailboxes due at once, 3 workers of concurrency 4,
against the Stalwart stand-in enforcing Stalwart's limits (1000 requests a minute, 4 at
once, refusing the rest as Stalwart does). Run twice: with Relay's shared limiter set to
those limits, and without it (limits set out of reach). Prints cleanups per second, the
calls per second against the allowed rate (a cleanup is two calls since the mail reader
takes a last look before the account goes: docs/architecture.md), dead letters and the
refusals the stand-in saw.

    scripts/bench.sh limiter_burst [--mailboxes 5000] [--per-minute 1000] [--latency-ms 5]
"""
import argparse
import sys
import time
from datetime import timedelta

from bench.common import celery_worker, command_line, fresh_database, record, setup_django, spawn, stop, wait_until


def burst(count: int, *, per_minute: int, latency_ms: float, limited: bool, broker) -> dict:
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from mailboxes.models import Mailbox
    from relay.backends.limiter import KEY_HOLDERS, KEY_STARTS
    from tests.stalwart_fake import TOKEN, FakeStalwart

    broker.flushdb()
    import redis

    redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL).delete(KEY_HOLDERS, KEY_STARTS)
    Mailbox.objects.all().delete()
    fake = FakeStalwart().start()
    fake.reset()
    fake.latency, fake.per_minute = latency_ms / 1000, per_minute
    due_at = timezone.now() - timedelta(seconds=1)
    Mailbox.objects.bulk_create([Mailbox(address=f"l{i}@relay.localhost", expires_at=due_at,
                                         backend_id=fake.add_account(f"l{i}")) for i in range(count)], batch_size=5000)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE mailboxes_mailbox")
    env = {"RELAY_BACKEND": "stalwart", "STALWART_URL": fake.url, "STALWART_TOKEN": TOKEN, "RELAY_AUTHSERV_ID": "mx.test",
           # Without the limiter: limits no burst reaches, so every call goes straight out.
           "RELAY_BACKEND_MAX_PER_MINUTE": str(per_minute if limited else 10_000_000),
           "RELAY_BACKEND_MAX_CONCURRENT": str(4 if limited else 10_000),
           # Production's retry clock (the test suite shortens it).
           "RELAY_CLEANUP_RETRY_BACKOFF_SECONDS": "30", "RELAY_CLEANUP_LEASE_SECONDS": "120"}
    workers = [celery_worker(f"w{i}", env=env, concurrency=4) for i in range(3)]
    started = time.monotonic()
    beat = spawn("beat", [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "WARNING",
                          "--pidfile=", "-s", "var/bench/beat-schedule"], env=env)
    settled = lambda: Mailbox.objects.filter(cleanup_state__in=["done", "dead"]).count()  # noqa: E731
    wait_until(lambda: settled() == count, 3600, "every cleanup to settle", interval=0.5)
    elapsed = time.monotonic() - started
    stop(beat, *workers)
    fake.stop()
    done = Mailbox.objects.filter(cleanup_state="done").count()
    return {"elapsed": elapsed, "done": done, "dead": count - done, "per_second": done / elapsed,
            "calls_per_second": fake.requests / elapsed, "refused": fake.refused_over_limit,
            "max_in_flight": fake.max_in_flight}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mailboxes", type=int, default=5000)
    parser.add_argument("--per-minute", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    args = parser.parse_args()
    fresh_database()
    setup_django()
    import redis
    from django.conf import settings

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    allowed = args.per_minute / 60
    for limited in (True, False):
        result = burst(args.mailboxes, per_minute=args.per_minute, latency_ms=args.latency_ms, limited=limited,
                       broker=broker)
        label = "with the limiter" if limited else "without the limiter"
        figures = (f"{label}: {args.mailboxes:,} mailboxes in {result['elapsed']:.0f} s, {result['done']:,} done, "
                   f"**{result['dead']:,} dead**; {result['per_second']:.1f} cleanups/s, "
                   f"{result['calls_per_second']:.1f} calls/s vs {allowed:.1f}/s allowed = ratio "
                   f"**{result['calls_per_second'] / allowed:.2f}**; the stand-in refused {result['refused']:,} "
                   f"calls over its limits (most at once: {result['max_in_flight']})")
        record("limiter_burst", command_line(), figures)


if __name__ == "__main__":
    main()
