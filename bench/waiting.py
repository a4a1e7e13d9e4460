"""Waiting and webhooks (docs/api.md), on gunicorn with uvicorn workers, runsmtp, Redis and
PostgreSQL:

1. wake-up latency: from runsmtp's `250` to the waiting client's response, over
   `--messages` messages, with `--idle` other waiters held meanwhile;
2. `GET /mailboxes/{id}` throughput (wrk) with no waiter and with `--crowd` idle
   waiters, in the same run;
3. webhook deliveries per second to a local receiver on 2 workers × 2, against the same
   POSTs made with raw `requests.post` from 4 processes.

    scripts/bench.sh waiting [--messages 500] [--idle 200] [--crowd 500] [--deliveries 2000]
"""
import argparse
import json
import multiprocessing
import smtplib
import sys
import textwrap
import threading
import time

from bench.api import PORT, _answers, wrk
from bench.common import (celery_worker, command_line, fresh_database, get, hold_idle_waiters, record, setup_django,
                          spawn, stop, wait_until)

SMTP_PORT = 2597
RECEIVER_PORT = 2596
RECEIVER = textwrap.dedent(f"""
    import sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", {RECEIVER_PORT}), Handler)
    print("ready", flush=True)
    server.serve_forever()
""")


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def wake_latency(key: str, mailbox, count: int) -> list[float]:
    latencies, last = [], 0
    for i in range(count):
        answer: dict = {}

        query = "wait=30" + (f"&after={last}" if last else "")

        def wait() -> None:
            answer["body"] = get(f"http://127.0.0.1:{PORT}/api/v1/mailboxes/{mailbox.id}/messages?{query}", key)
            answer["at"] = time.monotonic()

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.05)  # let the request be held before the mail is sent (the bench measures wake-up)
        with smtplib.SMTP("127.0.0.1", SMTP_PORT, timeout=10) as smtp:
            smtp.sendmail("bench@example.com", [mailbox.address],
                          f"Subject: wake {i}\r\n\r\nyour code is {100000 + i}\r\n".encode())
            accepted = time.monotonic()
        waiter.join(60)
        last = answer["body"]["results"][0]["id"]
        latencies.append(answer["at"] - accepted)
    return latencies


def raw_posts(count: int) -> None:
    import requests

    body = json.dumps({"type": "message.received", "timestamp": "x", "data": {"id": 1}}).encode()
    for _ in range(count):
        requests.post(f"http://127.0.0.1:{RECEIVER_PORT}/hook", data=body, timeout=10)


def webhook_throughput(owner, mailbox, count: int, broker) -> tuple[float, float]:
    from django.utils import timezone

    from webhooks import signing
    from webhooks.models import Webhook, WebhookDelivery
    from webhooks.tasks import publish_by_receiver

    processes = 4
    started = time.monotonic()
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        pool.map(raw_posts, [count // processes] * processes)
    raw = count / (time.monotonic() - started)

    broker.flushdb()
    workers = [celery_worker(f"hooks{i}", env={"RELAY_WEBHOOK_ALLOW_PRIVATE": "true", "RELAY_LOG_LEVEL": "WARNING"},
                             concurrency=2) for i in range(2)]
    webhook = Webhook.objects.create(owner=owner, url=f"http://127.0.0.1:{RECEIVER_PORT}/hook",
                                     events=["message.received"], secret=signing.new_secret())
    rows = WebhookDelivery.objects.bulk_create([
        WebhookDelivery(webhook=webhook, event="message.received", message_id=f"msg_bench_{i}",
                        payload={"type": "message.received", "timestamp": timezone.now().isoformat(),
                                 "data": {"id": i, "mailbox_id": str(mailbox.id)}},
                        lease_until=timezone.now() + timezone.timedelta(minutes=30))
        for i in range(count)])
    started = time.monotonic()
    # Queued as events queue them: by receiver, in batches (webhooks.tasks.publish_by_receiver).
    publish_by_receiver([(row.webhook_id, row.id) for row in rows])
    wait_until(lambda: WebhookDelivery.objects.filter(status="delivered").count() == count, 1800, "the deliveries")
    relay = count / (time.monotonic() - started)
    stop(*workers)
    return relay, raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--crowd", type=int, default=500)
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    fresh_database()
    setup_django()
    import redis
    from django.conf import settings

    from accounts.services import account_create_with_key
    from accounts.identity import Caller
    from mailboxes.lifecycle import mailbox_create
    from relay.backends import get_backend

    owner, key = account_create_with_key(login="bench", plan="enterprise")
    make = lambda: mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=None, domain=None,  # noqa: E731
                                  ttl_ms=3_600_000)[0]
    target, quiet = make(), [make() for _ in range(50)]
    quiet_ids = [mailbox.id for mailbox in quiet]
    # Hundreds of waiters of one key: this measures the server, not RELAY_MAX_OPEN_WAITS.
    env = {"RELAY_LOG_LEVEL": "WARNING", "RELAY_MAX_OPEN_WAITS": "10000"}
    web = spawn("web-asgi", [sys.executable, "-m", "gunicorn", "config.asgi", "-k", "core.serving.UvicornWorker",
                             "-w", "2", "-b", f"127.0.0.1:{PORT}"], env=env)
    smtp = spawn("smtp-waiting", [sys.executable, "manage.py", "runsmtp", "--port", str(SMTP_PORT)], env=env,
                 ready="Relay SMTP on")
    receiver = spawn("receiver", [sys.executable, "-c", RECEIVER], ready="ready")
    wait_until(lambda: _answers(f"http://127.0.0.1:{PORT}/api/schema/"), 60, "the ASGI server")
    stop_idle = threading.Event()
    try:
        idle = hold_idle_waiters(args.idle, quiet_ids, key, stop_idle, port=PORT)
        time.sleep(2)
        latencies = wake_latency(key, target, args.messages)
        stop_idle.set()
        load = dict(key=key, seconds=args.seconds, connections=16)
        wrk("/api/v1/whoami", **{**load, "seconds": 3})
        alone = wrk(f"/api/v1/mailboxes/{target.id}", **load)
        stop_crowd = threading.Event()
        hold_idle_waiters(args.crowd, quiet_ids, key, stop_crowd, port=PORT)
        time.sleep(3)
        crowded = wrk(f"/api/v1/mailboxes/{target.id}", **load)
        stop_crowd.set()
        broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        relay_rate, raw_rate = webhook_throughput(owner, target, args.deliveries, broker)
    finally:
        stop_idle.set()
        stop(web, smtp, receiver)
    figures = (f"wake-up from the SMTP 250 to the waiting client's answer, {args.messages} messages with "
               f"{args.idle} idle waiters: p50 **{percentile(latencies, 0.5) * 1000:.0f} ms**, "
               f"p99 **{percentile(latencies, 0.99) * 1000:.0f} ms**; GET mailbox {alone['rps']:.0f} req/s alone vs "
               f"{crowded['rps']:.0f} req/s with {args.crowd} idle waiters = ratio "
               f"**{crowded['rps'] / alone['rps']:.2f}** (errors {alone['errors'] + crowded['errors']}); "
               f"webhooks {relay_rate:.0f} deliveries/s vs raw requests.post from 4 processes {raw_rate:.0f}/s = "
               f"ratio **{relay_rate / raw_rate:.2f}**")
    record("waiting", command_line(), figures)


if __name__ == "__main__":
    main()
