"""Mail-out: activation mails through the outbox and `runmailer` (batches, one SMTP
connection per batch), against the same mails sent one Celery task per mail through
Django's SMTP backend (a connection per mail), into the same local SMTP sink, on the same
2 workers, in the same run. Then the latency from the row's insert to the sink's 250 at a
steady 50 sign-ups a second, and the mailer's RSS.

    scripts/bench.sh mailer [--mails 10000] [--rate 50] [--seconds 20]
"""
import argparse
import sys
import textwrap
import time

from bench.common import (LOGS, celery_worker, command_line, cpu_seconds, fresh_database, record, rss_mb, setup_django, spawn,
                          stop, wait_until)

SINK_PORT = 2599
# A sink that answers 250 to everything and writes "<unix time> <recipient>" per mail.
SINK = textwrap.dedent(f"""
    import asyncio, sys, time
    from aiosmtpd.controller import Controller

    out = open(sys.argv[1], "a", buffering=1)

    class Sink:
        async def handle_DATA(self, server, session, envelope):
            now = time.time()
            for rcpt in envelope.rcpt_tos:
                out.write(f"{{now:.6f}} {{rcpt}}\\n")
            return "250 OK"

    controller = Controller(Sink(), hostname="127.0.0.1", port={SINK_PORT})
    controller.start()
    print("ready", flush=True)
    asyncio.get_event_loop().run_forever()
""")


def sink_lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def activation_mails(count: int, prefix: str) -> None:
    from relay.outbox.account_mail import account_sign_up

    for i in range(count):
        account_sign_up(email=f"{prefix}{i}@example.com", login=f"{prefix}{i}")


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=50, help="sign-ups per second in the latency run")
    parser.add_argument("--seconds", type=int, default=20, help="length of the latency run")
    args = parser.parse_args()
    email_env = {"EMAIL_URL": f"smtp://127.0.0.1:{SINK_PORT}", "RELAY_LOG_LEVEL": "WARNING",
                 "RELAY_TOKEN_TTL_SECONDS": "86400"}
    import os

    os.environ.update(email_env)
    fresh_database()
    setup_django()
    import redis
    from django.conf import settings

    from bench.tasks import send_one_mail
    from relay.models import OutboxMail

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.flushdb()
    sink_log = LOGS / "mailer-sink.txt"
    sink_log.unlink(missing_ok=True)
    sink = spawn("mailer-sink", [sys.executable, "-c", SINK, str(sink_log)], ready="ready")
    workers = [celery_worker(f"mail{i}", env=email_env, concurrency=2) for i in range(2)]

    # The baseline: one task per mail, Django's send_mail (a connection per mail).
    activation_mails(args.mails, "base")
    mails = list(OutboxMail.objects.order_by("id").values_list("to", "subject", "text", "html"))
    OutboxMail.objects.all().delete()
    cpu = lambda: (cpu_seconds(sink.pid), sum(cpu_seconds(w.pid) for w in workers))  # noqa: E731
    cpu_before = cpu()
    started = time.monotonic()
    with send_one_mail.app.producer_or_acquire() as producer:
        for to, subject, text, html in mails:
            send_one_mail.apply_async((to, subject, text, html), producer=producer)
    wait_until(lambda: len(sink_lines(sink_log)) >= args.mails, 3600, "the per-task mails")
    per_task = args.mails / (time.monotonic() - started)
    per_task_cpu = [(after - before) / args.mails * 1000 for before, after in zip(cpu_before, cpu())]

    # The outbox: the same number of activation mails queued, then a mailer drains them.
    sink_log.write_text("")
    activation_mails(args.mails, "out")
    mailer = spawn("mailer", [sys.executable, "manage.py", "runmailer"], env={**email_env, "RELAY_LOG_LEVEL": "INFO"},
                   ready="connected; listening")
    cpu_before = cpu()
    started = time.monotonic()
    rss_start = rss_mb(mailer.pid)
    wait_until(lambda: len(sink_lines(sink_log)) >= args.mails, 3600, "the outbox mails")
    outbox = args.mails / (time.monotonic() - started)
    outbox_cpu = [(after - before) / args.mails * 1000 for before, after in zip(cpu_before, cpu())]
    rss_after_burst = rss_mb(mailer.pid)
    sent = OutboxMail.objects.filter(status="sent").count()
    assert sent == args.mails, f"{sent} outbox mails sent, expected {args.mails}"

    # Latency at a steady rate: insert → 250 at the sink.
    sink_log.write_text("")
    total = args.rate * args.seconds
    begin = time.monotonic()
    for i in range(total):
        activation_mails_at = begin + i / args.rate
        while time.monotonic() < activation_mails_at:
            time.sleep(0.001)
        activation_mails(1, f"lat{i}-")
    wait_until(lambda: len(sink_lines(sink_log)) >= total, 600, "the latency run's mails")
    accepted = {line.split()[1]: float(line.split()[0]) for line in sink_lines(sink_log)}
    created = dict(OutboxMail.objects.filter(kind="activation", to__0__startswith="lat")
                   .values_list("to__0", "created_at"))
    latencies = [accepted[rcpt] - created_at.timestamp() for rcpt, created_at in created.items()]
    rss_end = rss_mb(mailer.pid)
    stop(mailer, *workers, sink)

    timeout_ms = settings.RELAY_MAILER_BATCH_TIMEOUT_MS
    figures = (f"{args.mails:,} activation mails, 2 workers × 2: runmailer **{outbox:.0f} mails/s** vs one Celery "
               f"task per mail {per_task:.0f} mails/s = ratio **{outbox / per_task:.1f}×**; "
               f"latency insert → 250 at {args.rate} sign-ups/s (batch limit {settings.RELAY_MAILER_BATCH_LIMIT}, "
               f"timeout {timeout_ms} ms): p50 {percentile(latencies, 0.5) * 1000:.0f} ms, "
               f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms; "
               f"mailer RSS {rss_start:.0f} → {rss_after_burst:.0f} → {rss_end:.0f} MiB; CPU ms per mail "
               f"(sink, workers): outbox {outbox_cpu[0]:.2f}, {outbox_cpu[1]:.2f}; "
               f"per task {per_task_cpu[0]:.2f}, {per_task_cpu[1]:.2f}")
    record("mailer", command_line(), figures)


if __name__ == "__main__":
    main()
