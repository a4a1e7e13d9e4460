"""The operator's first screen (docs/architecture.md) at scale: 1,000,000 mailboxes (5 % active, the
rest expired and cleaned up over the last day, 1,000 dead letters, 1,000 owed cleanups),
100,000 sent mails and 100,000 webhook deliveries. Times the admin's home page, logged
in, rendered by Django in this process: cold (the state read from the database, as the
first load after the cache lapses) and warm (from the cache, as every other load within
RELAY_METRICS_CACHE_SECONDS), and a /metrics scrape cold. Goal: under 300 ms.

    scripts/bench.sh dashboard [--mailboxes 1000000] [--loads 10]
"""
import argparse
import statistics
import time

from bench.common import command_line, fresh_database, record, setup_django

MAILBOXES_SQL = """
INSERT INTO mailboxes_mailbox (id, address, status, created_at, expires_at, expired_at, message_count, stored_bytes,
    backend_id, cleanup_state, cleanup_attempts, cleanup_last_error, cleanup_queued_at, cleanup_done_at,
    cleanup_dead_at, name, tags, metadata)
SELECT gen_random_uuid(), 'm' || i || '@relay.localhost',
       CASE WHEN mod(i, 20) = 0 THEN 'active' ELSE 'expired' END,
       now() - interval '2 days', now() + CASE WHEN mod(i, 20) = 0 THEN interval '1 hour' ELSE -interval '1 day' END,
       CASE WHEN mod(i, 20) = 0 THEN NULL ELSE now() - mod(i, 86400) * interval '1 second' END,
       0, 0, '',
       CASE WHEN mod(i, 20) = 0 THEN '' WHEN mod(i, 1000) = 1 THEN 'dead' WHEN mod(i, 1000) = 3 THEN 'pending' ELSE 'done' END,
       1, '',
       now() - mod(i, 86400) * interval '1 second',
       CASE WHEN mod(i, 20) <> 0 AND mod(i, 1000) NOT IN (1, 3) THEN now() - mod(i, 86400) * interval '1 second' END,
       CASE WHEN mod(i, 1000) = 1 THEN now() - mod(i, 3600) * interval '1 second' END,
       '', '[]', '{}'
FROM generate_series(1, %(count)s) AS i
"""
OUTBOX_SQL = """
INSERT INTO relay_outboxmail (kind, priority, from_email, "to", subject, text, html, message, status, attempts,
    last_error, created_at)
SELECT 'send', 2, '', '["x@example.com"]', 's', 't', '', '', CASE WHEN mod(i, 1000) = 0 THEN 'failed' ELSE 'sent' END,
       1, '', now() - mod(i, 86400) * interval '1 second'
FROM generate_series(1, 100000) AS i
"""
DELIVERIES_SQL = """
INSERT INTO webhooks_webhookdelivery (webhook_id, event, payload, message_id, status, attempts, last_error, created_at)
SELECT %(webhook)s, 'message.received', '{}', 'msg_' || i, CASE WHEN mod(i, 1000) = 0 THEN 'failed' ELSE 'delivered' END,
       1, '', now() - mod(i, 86400) * interval '1 second'
FROM generate_series(1, 100000) AS i
"""


def fill(count: int) -> None:
    from django.db import connection

    from accounts.models import Account
    from webhooks.models import Webhook

    owner = Account.objects.create(login="bench", email="bench@example.com")
    webhook = Webhook.objects.create(owner=owner, url="https://hooks.example.com/", events=["message.received"],
                                     secret="whsec_bench")
    with connection.cursor() as cursor:
        cursor.execute(MAILBOXES_SQL, {"count": count})
        cursor.execute(OUTBOX_SQL)
        cursor.execute(DELIVERIES_SQL, {"webhook": webhook.id})
    connection.set_autocommit(True)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def timed(get, loads: int, *, cold: bool) -> list[float]:
    from django.core.cache import cache

    from api.gauges import CACHE_KEY

    times = []
    for _ in range(loads):
        if cold:
            cache.delete(CACHE_KEY)
        started = time.perf_counter()
        response = get()
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.status_code
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mailboxes", type=int, default=1_000_000)
    parser.add_argument("--loads", type=int, default=10)
    args = parser.parse_args()
    fresh_database()
    setup_django()
    from django.contrib.auth.models import User
    from django.test import Client

    started = time.monotonic()
    fill(args.mailboxes)
    print(f"filled {args.mailboxes:,} mailboxes in {time.monotonic() - started:.0f} s")
    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.create_superuser("bench", "bench@example.com", "bench-password-long"))
    page = lambda: client.get("/admin/")  # noqa: E731
    body = page().content.decode()
    assert f"{args.mailboxes // 20:,}" in body, "the page should show the active mailboxes"
    cold = timed(page, args.loads, cold=True)
    warm = timed(page, args.loads, cold=False)
    scrape = timed(lambda: client.get("/metrics"), args.loads, cold=True)
    figures = (f"{args.mailboxes:,} mailboxes: admin home cold p50 **{statistics.median(cold):.0f} ms** "
               f"(max {max(cold):.0f}), warm p50 {statistics.median(warm):.0f} ms (max {max(warm):.0f}); "
               f"/metrics cold p50 {statistics.median(scrape):.0f} ms (max {max(scrape):.0f}); {args.loads} loads each")
    record("dashboard", command_line(), figures)


if __name__ == "__main__":
    main()
