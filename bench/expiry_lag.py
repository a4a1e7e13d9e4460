"""Expiry lag: a steady stream of mailboxes falling due (default 100 a second for 2
minutes), default settings, 2 worker processes and a beat, local backend. Prints p50,
p99 and max of (cleanup done - expires_at), with expire tasks scheduled ahead (Relay's
design) and, as the same-run baseline, with the sweep alone.

    scripts/bench.sh expiry_lag [--rate 100] [--seconds 120] [--lead 15] [--spread]

By default each tick's mailboxes fall due at the same instant; with --spread they fall
due evenly over their 100 ms tick, as those of independent clients would.
"""
import argparse
import sys
import time
from datetime import timedelta

from bench.common import celery_worker, command_line, fresh_database, record, setup_django, spawn, stop, wait_until


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run(*, rate: int, seconds: int, lead: float, schedule_ahead: bool, spread: bool) -> dict:
    import redis
    from django.conf import settings
    from django.utils import timezone

    from mailboxes.models import Mailbox

    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    Mailbox.objects.all().delete()
    env = {"RELAY_EXPIRY_SCHEDULE_AHEAD": "true" if schedule_ahead else "false"}
    label = "ahead" if schedule_ahead else "sweep-only"
    workers = [celery_worker(f"{label}-w{i}", env=env) for i in range(2)]
    beat = spawn(f"{label}-beat", [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "INFO",
                                   "--pidfile=", "-s", f"var/bench/{label}-beat-schedule"], env=env)
    # The feeder: every 100 ms, rate/10 mailboxes that fall due `lead` seconds later.
    tick, per_tick, created = 0.1, max(1, rate // 10), 0
    start = time.monotonic()
    for step in range(int(seconds / tick)):
        now = timezone.now()
        Mailbox.objects.bulk_create([
            Mailbox(address=f"{label}-{step}-{i}@relay.localhost",
                    expires_at=now + timedelta(seconds=lead + (tick * i / per_tick if spread else 0)))
            for i in range(per_tick)
        ])
        created += per_tick
        time.sleep(max(0.0, start + (step + 1) * tick - time.monotonic()))
    wait_until(lambda: Mailbox.objects.filter(cleanup_state="done").count() == created, 600,
               "every cleanup to finish", interval=0.5)
    stop(beat, *workers)
    lags = [(done - due).total_seconds()
            for done, due in Mailbox.objects.values_list("cleanup_done_at", "expires_at")]
    return {"count": created, "p50": percentile(lags, 0.5), "p99": percentile(lags, 0.99), "max": max(lags)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--lead", type=float, default=15.0, help="seconds from creation to expires_at")
    parser.add_argument("--spread", action="store_true", help="each tick's mailboxes fall due evenly over the tick")
    args = parser.parse_args()
    fresh_database()
    setup_django()
    results = {}
    for schedule_ahead in (True, False):
        results[schedule_ahead] = run(rate=args.rate, seconds=args.seconds, lead=args.lead,
                                      schedule_ahead=schedule_ahead, spread=args.spread)
        print("scheduled ahead" if schedule_ahead else "sweep only", results[schedule_ahead])
    ahead, sweep = results[True], results[False]
    figures = (f"{ahead['count']:,} mailboxes at {args.rate}/s{', spread over each tick' if args.spread else ''}: scheduled ahead p50 **{ahead['p50']:.2f} s**, "
               f"p99 **{ahead['p99']:.2f} s**, max {ahead['max']:.2f} s; sweep only (5 s) p50 {sweep['p50']:.2f} s, "
               f"p99 {sweep['p99']:.2f} s, max {sweep['max']:.2f} s")
    record("expiry_lag", command_line(), figures)


if __name__ == "__main__":
    main()
