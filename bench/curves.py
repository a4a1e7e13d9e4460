"""Cost curves (issue 71): four of Relay's costs against the size that drives them, each
drawn with the baseline measured in the same run on the same axes, into docs/curve-*.png,
and each curve's points as a row of the "Cost curves" table in docs/benchmarks.md.

- ingest: messages per second stored by `runsmtp` against the message's size (1 KB to
  5 MB), 8 connections; baseline: the bare aiosmtpd server that discards every message
  (bench/smtp_ingest.py), fed the same messages, size by size.
- search: p99 of `GET /messages?q=` (`quartz`, 1 message in 1,000; `zebra`, 1 in
  100,000) against the number of stored messages (10 k to 1 M, bench/search.py's corpus),
  filled as it grows: the rows of each size are added to the last size's, and the word
  index rebuilt; baseline: `GET /mailboxes/{id}`'s p99 at the same size.
- expiry: seconds until every cleanup of a burst is done against the mailboxes due at
  once (1 k to 100 k), 2 workers and a beat (bench/expiry_burst.py); baseline: as many
  no-op Celery tasks published from a worker while the same 2 workers consume them.
- waits: p99 of `GET /mailboxes/{id}` against the long-polls held open meanwhile (0 to
  1,000 `?wait=60`, their re-asks spread over the minute); baseline: the bare Django view
  making the same select (bench/baseline_asgi.py), served by the same workers.

    scripts/bench.sh curves [--only ingest,search,expiry,waits] [--quick] [--seconds 10]

`--quick` draws each curve to a smaller maximum (ingest 100 KB, search 30 k, expiry
3 k, waits 100), for a check of the machinery in a few minutes. Each curve runs in a
process of its own; curves run at once (two `scripts/bench.sh curves` of one clone, say
the search fill beside the others) take turns measuring their points (`measuring`). The search curve refills a database of its own: RELAY_BENCH_DATABASE
with `_search` after it (relay_bench_search by default, the one `search --reuse` reads).
"""
import argparse
import os
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit, urlunsplit

from bench.common import ROOT, fresh_database, measuring, plot_curve, record, setup_django, spawn, wait_until

CURVES = ("ingest", "search", "expiry", "waits")
KB, MB = 1024, 1024 * 1024
SIZES = {
    "ingest": [1 * KB, 3 * KB, 10 * KB, 30 * KB, 100 * KB, 300 * KB, 1 * MB, 3 * MB, 5 * MB],
    "search": [10_000, 30_000, 100_000, 300_000, 1_000_000],
    "expiry": [1_000, 3_000, 10_000, 30_000, 100_000],
    "waits": [0, 10, 30, 100, 300, 1000],
}
QUICK = {
    "ingest": [1 * KB, 10 * KB, 100 * KB],
    "search": [10_000, 30_000],
    "expiry": [1_000, 3_000],
    "waits": [0, 10, 100],
}
CONNECTIONS = 16  # wrk's, for the HTTP curves
SMTP_CONNECTIONS = 8


def size_label(size: int) -> str:
    return f"{size // MB} MB" if size >= MB else f"{size // KB} KB"


def count_label(count: int) -> str:
    return f"{count // 1_000_000} M" if count >= 1_000_000 else f"{count // 1000} k" if count >= 1000 else str(count)


# --- 1. ingest against message size ----------------------------------------------------------------
def ingest_messages(size: int, quick: bool) -> int:
    """How many messages of `size` a point sends to each server: about 100 MB (20 MB quick),
    at most 2,000 (400), at least 3 per connection; a multiple of the connections."""
    budget, most = (20 * MB, 400) if quick else (100 * MB, 2000)
    count = max(3 * SMTP_CONNECTIONS, min(most, budget // size))
    return count // SMTP_CONNECTIONS * SMTP_CONNECTIONS


def ingest_curve(sizes: list[int], quick: bool) -> tuple[dict, list[str]]:
    from bench.common import bench_addresses, celery_worker, cpu_seconds, database_name, postgres_cpu_seconds
    from bench.smtp_ingest import BARE_SERVER, _answers, blast, cpu_per_message, sender_dns
    from tests.ports import free_port

    fresh_database()
    setup_django()
    from mailboxes.models import Message, MessageContent

    addresses = bench_addresses()
    dns = sender_dns()
    bare_port, relay_port = free_port(), free_port()
    bare = spawn("curve-smtp-bare", [sys.executable, "-c", BARE_SERVER, str(bare_port)], ready="ready")
    relay = spawn("curve-smtp-relay", [sys.executable, "manage.py", "runsmtp", "--port", str(relay_port)],
                  env={"RELAY_LOG_LEVEL": "WARNING", "RELAY_DNS_RESOLVERS": f"127.0.0.1:{dns.port}"},
                  ready="Relay SMTP on")
    wait_until(lambda: _answers(relay_port), 30, "runsmtp")
    worker = celery_worker("curve-words")
    database = database_name()  # the PostgreSQL backends of this run's database, not the machine's
    parts = {"runsmtp": lambda: cpu_seconds(relay.pid), "PostgreSQL": lambda: postgres_cpu_seconds(database),
             "worker": lambda: cpu_seconds(worker.pid)}
    relay_rates, bare_rates, rows, sent = [], [], [], 200
    try:
        blast(bare_port, addresses, 200, SMTP_CONNECTIONS)  # warm up both
        blast(relay_port, addresses, 200, SMTP_CONNECTIONS)
        for size in sizes:
            count = ingest_messages(size, quick)
            with measuring():
                bare_rate = blast(bare_port, addresses, count, SMTP_CONNECTIONS, size)
                relay_rate, spent = cpu_per_message(
                    lambda: (blast(relay_port, addresses, count, SMTP_CONNECTIONS, size), count), parts)
                last_250 = time.monotonic()
                sent += count
                # The next size starts with no words owed: each point's worker load is its own.
                wait_until(lambda: not MessageContent.objects.filter(words__isnull=True).exists(), 1800,
                           "the owed words", interval=0.2)
                lag = time.monotonic() - last_250
            relay_rates.append(relay_rate)
            bare_rates.append(bare_rate)
            rows.append(f"{size_label(size)} ×{count:,}: Relay **{relay_rate:.1f}** vs bare {bare_rate:.0f} msg/s "
                        f"({relay_rate / bare_rate:.3f}; {relay_rate * size / MB:.1f} MB/s; CPU ms/msg runsmtp "
                        f"{spent['runsmtp']:.1f}, PostgreSQL {spent['PostgreSQL']:.1f}, words "
                        f"{spent['worker']:.1f}; words done {lag:.1f} s after the last 250)")
            print(rows[-1], flush=True)
        stored = Message.objects.count()
    finally:
        dns.stop()
    assert stored == sent, f"Relay stored {stored} of {sent} messages"
    kb = [size / KB for size in sizes]
    return {"path": "curve-ingest.png", "title": f"SMTP ingest, {SMTP_CONNECTIONS} connections",
            "xlabel": "message size (KB)", "ylabel": "messages stored per second",
            "series": {"Relay runsmtp": (kb, relay_rates), "bare aiosmtpd (discards)": (kb, bare_rates)}}, rows


# --- 2. search against corpus size ---------------------------------------------------------------
def search_curve(sizes: list[int], seconds: int) -> tuple[dict, list[str]]:
    from bench.api import _answers
    from bench.common import database_name
    from bench.search import corpus_grow, corpus_index, corpus_start, wrk_with_cpu
    from tests.ports import free_port

    fresh_database()
    setup_django()
    key, mailbox = corpus_start(2000)
    port = free_port()
    web = spawn("curve-search-web", [sys.executable, "-m", "gunicorn", "config.asgi", "-k",
                                     "core.serving.UvicornWorker", "-w", "2", "-b", f"127.0.0.1:{port}"],
                env={"RELAY_LOG_LEVEL": "WARNING"})
    wait_until(lambda: _answers(f"http://127.0.0.1:{port}/api/schema/"), 60, "gunicorn")
    # PostgreSQL's CPU counted for this run's database only: others fill theirs on this machine.
    load = dict(key=key, seconds=seconds, connections=CONNECTIONS, port=port, database=database_name())
    paths = {"GET mailbox": f"/api/v1/mailboxes/{mailbox.id}", "q=quartz": "/api/v1/messages?q=quartz",
             "q=zebra": "/api/v1/messages?q=zebra"}
    p99s: dict[str, list[float]] = {name: [] for name in paths}
    rows, have = [], 0
    for size in sizes:
        started = time.monotonic()
        corpus_grow(have, size)
        index_size, table_size = corpus_index()
        have, filled = size, time.monotonic() - started
        results = {}
        with measuring():
            for name, path in paths.items():
                wrk_with_cpu(web, path, **{**load, "seconds": 2})  # each path's pages read once before
                results[name] = wrk_with_cpu(web, path, **load)
                p99s[name].append(results[name]["p99_ms"])
        errors = sum(result["errors"] for result in results.values())
        rows.append(f"{count_label(size)} (index {index_size}, messages {table_size}, grown and indexed in "
                    f"{filled:.0f} s): " + ", ".join(
                        f"{name} p99 **{result['p99_ms']:.1f} ms** {result['rps']:.0f} req/s (CPU ms/req web "
                        f"{result['cpu_ms']['web']:.1f}, PostgreSQL {result['cpu_ms']['PostgreSQL']:.1f})"
                        for name, result in results.items()) + f", errors {errors}")
        print(rows[-1], flush=True)
    return {"path": "curve-search.png", "title": f"Search, 2 uvicorn workers, wrk -c {CONNECTIONS}",
            "xlabel": "messages stored", "ylabel": "p99 (ms)",
            "series": {"GET /messages?q=quartz (1 in 1,000)": (sizes, p99s["q=quartz"]),
                       "GET /messages?q=zebra (1 in 100,000)": (sizes, p99s["q=zebra"]),
                       "GET /mailboxes/{id} (baseline)": (sizes, p99s["GET mailbox"])}}, rows


# --- 3. expiry burst against mailboxes due at once -------------------------------------------------
def expiry_curve(sizes: list[int]) -> tuple[dict, list[str]]:
    from bench.expiry_burst import noop_baseline, relay_burst

    fresh_database()
    setup_django()
    import redis
    from django.conf import settings

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    relay_seconds, noop_seconds, rows = [], [], []
    for count in sizes:
        with measuring():
            noop_rate, _ = noop_baseline(count, broker, consume_only=False)
            result = relay_burst(count, broker, backend="local", latency_ms=0, second=0)
        relay_seconds.append(count / result["per_second"])
        noop_seconds.append(count / noop_rate)
        rows.append(f"{count_label(count)}: Relay **{relay_seconds[-1]:.1f} s** ({result['per_second']:.0f}/s) vs "
                    f"no-op tasks {noop_seconds[-1]:.1f} s ({noop_rate:.0f}/s), ratio "
                    f"{relay_seconds[-1] / noop_seconds[-1]:.2f}; worker RSS {result['rss_before_mb']:.0f} → "
                    f"{result['rss_after_mb']:.0f} MiB")
        print(rows[-1], flush=True)
    return {"path": "curve-expiry.png", "title": "Expiry burst, 2 workers (-c 1) and a beat",
            "xlabel": "mailboxes due at once", "ylabel": "seconds until the last is done",
            "series": {"Relay: every cleanup done": (sizes, relay_seconds),
                       "as many no-op Celery tasks (baseline)": (sizes, noop_seconds)}}, rows


# --- 4. API p99 against open waits ----------------------------------------------------------------
def waits_curve(sizes: list[int], seconds: int) -> tuple[dict, list[str]]:
    from bench.api import _answers, wrk
    from bench.common import hold_idle_waiters, rss_mb
    from bench.mcp_wait import open_waits
    from tests.ports import free_port

    fresh_database()
    setup_django()
    import redis
    from django.conf import settings

    from accounts.identity import Caller
    from accounts.services import account_create_with_key
    from mailboxes.lifecycle import mailbox_create
    from relay.backends import get_backend

    store = redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL)
    store.flushdb()  # only this run's open waits are counted
    owner, key = account_create_with_key(login="bench", plan="enterprise")
    mailboxes = [mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=None, domain=None,
                                ttl_ms=3_600_000)[0] for _ in range(51)]
    target, quiet_ids = mailboxes[0], [mailbox.id for mailbox in mailboxes[1:]]
    port = free_port()
    # Relay's application with the baseline's route (bench/baseline_asgi.py), one set of workers.
    web = spawn("curve-waits-web", [sys.executable, "-m", "gunicorn", "bench.baseline_asgi", "-k",
                                    "core.serving.UvicornWorker", "-w", "2", "-b", f"127.0.0.1:{port}"],
                env={"RELAY_LOG_LEVEL": "WARNING", "RELAY_MAX_OPEN_WAITS": "10000"})
    wait_until(lambda: _answers(f"http://127.0.0.1:{port}/api/schema/"), 60, "gunicorn")
    load = dict(key=key, seconds=seconds, connections=CONNECTIONS, port=port)
    paths = {"GET mailbox": f"/api/v1/mailboxes/{target.id}", "baseline": f"/baseline/mailboxes/{target.id}"}
    for path in paths.values():
        wrk(path, **{**load, "seconds": 3})  # warm up every worker
    p99s: dict[str, list[float]] = {name: [] for name in paths}
    rows, held, stop_waiting = [], 0, threading.Event()
    try:
        for count in sizes:
            hold_idle_waiters(count - held, quiet_ids, key, stop_waiting, port=port, staggered=True)
            held = count
            # Each re-ask leaves its place for a moment: nearly all of them held.
            wait_until(lambda: open_waits(store) >= count - count // 50, 120, f"{count} open waits", interval=0.2)
            time.sleep(2)  # their first looks done
            with measuring():
                results = {name: wrk(path, **load) for name, path in paths.items()}
            for name, result in results.items():
                p99s[name].append(result["p99_ms"])
            api, base = results["GET mailbox"], results["baseline"]
            rows.append(f"{count:,} held ({open_waits(store):,} counted): GET mailbox p99 **{api['p99_ms']:.1f} ms** "
                        f"{api['rps']:.0f} req/s vs bare view p99 {base['p99_ms']:.1f} ms {base['rps']:.0f} req/s "
                        f"(errors {api['errors'] + base['errors']}); web RSS {rss_mb(web.pid):.0f} MiB")
            print(rows[-1], flush=True)
    finally:
        stop_waiting.set()
    return {"path": "curve-waits.png", "title": f"API under held waits, 2 uvicorn workers, wrk -c {CONNECTIONS}",
            "xlabel": "long-polls held open", "ylabel": "p99 (ms)",
            "series": {"GET /mailboxes/{id}": (sizes, p99s["GET mailbox"]),
                       "bare Django view, same select (baseline)": (sizes, p99s["baseline"])}}, rows


def run_curve(name: str, quick: bool, seconds: int) -> None:
    sizes = (QUICK if quick else SIZES)[name]
    if name == "ingest":
        figure, rows = ingest_curve(sizes, quick)
    elif name == "search":
        figure, rows = search_curve(sizes, seconds)
    elif name == "expiry":
        figure, rows = expiry_curve(sizes)
    else:
        figure, rows = waits_curve(sizes, seconds)
    plot_curve(ROOT / "docs" / figure["path"], figure["title"] + (" (quick)" if quick else ""),
               figure["xlabel"], figure["ylabel"], figure["series"])
    command = f"scripts/bench.sh curves --only {name}" + (" --quick" if quick else "") + (
        f" --seconds {seconds}" if seconds != 10 and name in ("search", "waits") else "")
    record("curves", command, f"{name} (docs/{figure['path']}): " + "; ".join(rows))


def search_database(url: str) -> str:
    """DATABASE_URL's database with `_search` after its name: the search curve's own."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    return urlunsplit(parts._replace(path="/" + (name if name.endswith("_search") else name + "_search")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(CURVES),
                        help=f"the curves to draw, comma-separated, of {', '.join(CURVES)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="smaller maxima, for a run of a few minutes")
    parser.add_argument("--seconds", type=int, default=10, help="wrk's run at each point of the HTTP curves")
    parser.add_argument("--curve", help=argparse.SUPPRESS)  # one curve, in this process
    args = parser.parse_args()
    if args.curve:
        return run_curve(args.curve, args.quick, args.seconds)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(chosen) - set(CURVES)
    if unknown:
        raise SystemExit(f"no such curve: {', '.join(sorted(unknown))} (of {', '.join(CURVES)})")
    for name in chosen:
        env = dict(os.environ)
        if name == "search":
            env["DATABASE_URL"] = search_database(env["DATABASE_URL"])
        print(f"--- curve {name}", flush=True)
        subprocess.run([sys.executable, __file__, "--curve", name, "--seconds", str(args.seconds),
                        *(["--quick"] if args.quick else [])], env=env, check=True)


if __name__ == "__main__":
    main()
