"""The soak: the whole stack as `make run` starts it (web, worker, beat, smtp, mailer),
on PostgreSQL and Redis, under a steady mix for an hour, driven from outside over HTTP
and SMTP.

Every second it starts `--rate` mailbox lives (default 25). Each creates a mailbox with
a lifetime of 1 to 4 s; one in five is mailed over SMTP and read back (the wait, the
message, its raw bytes); one in ten is renewed, one in ten deleted, one in twenty-five
sends a mail out through the mailer to a local SMTP sink. A webhook takes every event at
a local HTTP receiver. After its end each mailbox is read again: expired, or 404 if
deleted.

Every 30 s it samples the RSS of each process, the log lines by level, the cleanups
owed and the errors so far. At the end it checks that every mailbox is accounted for
(cleanup done, or dead with a reason), then prints and records: the RSS slope of each
process over the last three quarters of the run (MiB/hour), log lines per minute by
level, the most cleanups owed at once, the errors and the throughput. The RSS chart is
docs/soak-rss.png.

    scripts/bench.sh soak [--minutes 60] [--rate 25]
"""
import argparse
import atexit
import collections
import os
import random
import re
import signal
import smtplib
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from email.message import EmailMessage
from pathlib import Path

import requests

from bench.common import LOGS, ROOT, command_line, fresh_database, record, setup_django, wait_until
from bench.soak_parts import (AFTER_END_410, AFTER_END_550, Counters, CountingRetry, account_key, accounted, chart,
                              ends_at, free_port, outbox_settled, owed, rss_mib, slope_mib_per_hour, smtp_sink,
                              webhook_receiver)

SAMPLE_EVERY_SECONDS = 30
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# The level of a log line, as Django's formatter ("... WARNING name message"), Celery's
# ("[...: WARNING/MainProcess]") and uvicorn's ("WARNING:  ...") write it.
LEVEL_RE = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b[:/ ]")


class Stack:
    """scripts/run.sh on the benchmark's PostgreSQL and Redis, its output in one log."""

    def __init__(self, env: dict):
        self.web_port, self.smtp_port = free_port(), free_port()
        self.log = LOGS / "soak.log"
        self._read_to, self._levels = 0, collections.Counter()
        LOGS.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **env, "RELAY_WEB_PORT": str(self.web_port), "RELAY_SMTP_PORT": str(self.smtp_port),
               "RELAY_VAR_DIR": "var/soak", "RELAY_RUN_IN_FOREGROUND": "1",
               # One key holds every client's waits: the soak measures the stack, not the cap.
               "RELAY_MAX_OPEN_WAITS": "10000"}
        self.proc = subprocess.Popen(["scripts/run.sh"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self.log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.web_port}"
        atexit.register(self.stop)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the stack is stopped too
        wait_until(self._ready, 90, "the stack to start", interval=0.5)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise SystemExit(f"run.sh exited:\n{self.log.read_text(errors='replace')[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", self.smtp_port), timeout=1):
                pass
            return requests.get(self.url + "/readyz", timeout=2).status_code == 200
        except (OSError, requests.RequestException):
            return False

    def processes(self) -> dict[str, int]:
        """Each Relay process by role: web, worker, worker-child-N, beat, smtp(-N), mailer."""
        found, stack = {}, [(self.proc.pid, None)]
        while stack:
            pid, parent_role = stack.pop()
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
            role = None
            if "python" in cmdline or "celery" in cmdline or "uvicorn" in cmdline:
                for name, marker in (("web", "uvicorn"), ("worker", " worker "), ("beat", " beat "),
                                     ("smtp", "runsmtp"), ("mailer", "runmailer")):
                    if marker in cmdline:
                        role = name if parent_role != name else f"{name}-child"
                        break
            if role:
                if role.endswith("-child"):
                    role += f"-{sum(1 for r in found if r.startswith(role))}"
                found[role] = pid
            stack += [(child, role or parent_role) for child in sorted(children)]
        return found

    def log_levels(self) -> collections.Counter:
        """Log lines so far by level, read on from where the last call stopped."""
        with self.log.open("rb") as log:
            log.seek(self._read_to)
            chunk = log.read()
        complete = chunk.rfind(b"\n") + 1
        self._read_to += complete
        for line in chunk[:complete].decode(errors="replace").splitlines():
            match = LEVEL_RE.search(line)
            if match:
                self._levels[match.group(1)] += 1
        return collections.Counter(self._levels)

    def warnings(self, limit: int = 10) -> list[str]:
        with self.log.open(errors="replace") as log:
            lines = [line.rstrip() for line in log if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", line)]
        return lines[:limit]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)


class Load:
    """The mailbox lives, each in a thread of a pool; errors are counted by what failed."""

    def __init__(self, stack: Stack, key: str, counters: Counters):
        self.stack, self.counters = stack, counters
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"
        # As browsers do, a GET sent on a pooled connection the server closed at that very
        # instant (its keep-alive ran out) is sent again, once; each such retry is counted.
        retry = CountingRetry(total=1, connect=1, read=1, status=0, other=0, allowed_methods=frozenset({"GET"}))
        retry.counters = counters
        adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=400, max_retries=retry)
        self.session.mount("http://", adapter)
        self.ids: list[str] = []
        self._lock = threading.Lock()

    def api(self, method: str, path: str, expect: tuple, ends_at: float | None = None, **kwargs):
        # A 410 once the mailbox's end (`ends_at`) has passed is right for a read its short
        # life outran: counted, not an error. Before that end it is one.
        try:
            response = self.session.request(method, self.stack.url + "/api/v1" + path, timeout=30, **kwargs)
        except requests.RequestException as exc:
            self.counters.error(f"{method} {path.split('/')[1]}: {type(exc).__name__}", detail=str(exc)[:200])
            return None
        self.counters.add("api requests")
        if response.status_code == 410 and ends_at is not None and time.time() >= ends_at:
            self.counters.add(AFTER_END_410)
            return None
        if response.status_code not in expect:
            self.counters.error(f"{method} {path.split('/')[1]} -> {response.status_code} {response.text[:120]}")
            return None
        return response

    def life(self, n: int) -> None:
        # A mailbox that sends lives long enough for the mailer's batch (1 s) to take it.
        ttl_ms = random.randint(10_000, 15_000) if n % 25 == 2 else random.randint(1000, 4000)
        created = self.api("POST", "/mailboxes", (201,), json={"ttl_ms": ttl_ms, "tags": ["soak"]})
        if created is None:
            return
        box = created.json()
        with self._lock:
            self.ids.append(box["id"])
        self.counters.add("mailboxes")
        path = f"/mailboxes/{box['id']}"
        end = ends_at(box)
        deleted = False
        if n % 5 == 0:
            self.mail(box, n)
        if n % 10 == 1:
            self.api("POST", path + "/renew", (200,), ends_at=end, json={"ttl_ms": ttl_ms})
            self.counters.add("renews")
        if n % 25 == 2:
            self.api("POST", path + "/messages", (202,),
                     json={"to": ["someone@example.com"], "subject": f"soak {n}", "text": "hello from the soak"})
            self.counters.add("mail out")
        if n % 10 == 3:
            deleted = self.api("DELETE", path, (204,)) is not None
            self.counters.add("deletes")
        # After its end: gone if deleted, else expired (in the answer of the read itself).
        time.sleep(ttl_ms / 1000 * (2 if n % 10 == 1 else 1) + 0.2)
        after = self.api("GET", path, (404,) if deleted else (200,))
        if after is not None and not deleted and after.json()["status"] != "expired":
            self.counters.error(f"GET after expiry -> {after.json()['status']}")

    def mail(self, box: dict, n: int) -> None:
        end = ends_at(box)
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = "soak@example.com", box["address"], f"Your code {n}"
        message.set_content(f"Your verification code is {100000 + n % 900000}.\n" + "filler line\n" * 40)
        try:
            with smtplib.SMTP("127.0.0.1", self.stack.smtp_port, timeout=30) as smtp:
                smtp.send_message(message)
        except smtplib.SMTPRecipientsRefused as exc:
            # Refused at RCPT once the mailbox's end has passed is right, as a 410 is.
            if time.time() >= end and all(code == 550 for code, _ in exc.recipients.values()):
                self.counters.add(AFTER_END_550)
            else:
                self.counters.error(f"SMTP: {type(exc).__name__} {exc}"[:160])
            return
        except (OSError, smtplib.SMTPException) as exc:
            self.counters.error(f"SMTP: {type(exc).__name__} {exc}"[:160])
            return
        self.counters.add("mail in")
        path = f"/mailboxes/{box['id']}/messages"
        listed = self.api("GET", path + "?wait=5", (200,), ends_at=end)
        if listed is None or not listed.json()["results"]:
            if listed is not None or time.time() < end:
                self.counters.error("the delivered message is not listed")
            return
        mid = listed.json()["results"][0]["id"]
        shown = self.api("GET", f"{path}/{mid}", (200,), ends_at=end)
        if shown is not None and str(100000 + n % 900000) not in shown.json()["codes"]:
            self.counters.error("the code was not found")
        self.api("GET", f"{path}/{mid}/raw", (200,), ends_at=end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=int, default=25, help="mailbox lives started a second")
    args = parser.parse_args()
    fresh_database()
    import redis
    from django.conf import settings

    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    key = account_key()
    counters = Counters()
    receiver, sink = webhook_receiver(counters), smtp_sink(counters)
    stack = Stack({"RELAY_MIN_TTL_MS": "1000", "RELAY_WEBHOOK_ALLOW_PRIVATE": "true",
                   "EMAIL_URL": f"smtp://127.0.0.1:{sink.port}"})
    load = Load(stack, key, counters)
    load.api("POST", "/webhooks", (201,), json={
        "url": f"http://127.0.0.1:{receiver.server_address[1]}/hook",
        "events": ["message.received", "mailbox.expired", "mailbox.deleted", "cleanup.dead"]})
    print(f"soak: {args.rate} mailbox lives a second for {args.minutes:g} min; stack log {stack.log}")

    samples, started, n = [], time.monotonic(), 0
    duration = args.minutes * 60
    next_sample = started
    with ThreadPoolExecutor(max_workers=args.rate * 12) as pool:
        while (elapsed := time.monotonic() - started) < duration:
            if time.monotonic() >= next_sample:
                sample = {"t": elapsed, "rss": {role: rss_mib(pid) for role, pid in stack.processes().items()},
                          "levels": stack.log_levels(), "owed": owed(), "errors": sum(counters.errors.values())}
                sample["rss"] = {role: mib for role, mib in sample["rss"].items() if mib is not None}
                samples.append(sample)
                print(f"{elapsed / 60:5.1f} min  owed {sample['owed']:3d}  errors {sample['errors']}  "
                      f"warnings+ {sum(sample['levels'][lv] for lv in LEVELS[2:])}  "
                      + "  ".join(f"{role} {mib:.0f}" for role, mib in sorted(sample["rss"].items())), flush=True)
                next_sample += SAMPLE_EVERY_SECONDS
            for _ in range(args.rate):
                pool.submit(load.life, n)
                n += 1
            time.sleep(max(0.0, started + n / args.rate - time.monotonic()))
    ran = time.monotonic() - started

    # Every mailbox accounted for: its cleanup done, or dead with its reason.
    def settled():
        state = accounted(load.ids)
        return state if set(state["states"]) <= {"done", "dead"} and not state["missing"] else None
    try:
        final = wait_until(settled, 300, "every cleanup to settle", interval=1)
    except SystemExit:
        final = accounted(load.ids)
    try:
        outbox = wait_until(outbox_settled, 120, "the mailer to settle every mail", interval=1)
    except SystemExit:
        outbox = outbox_settled(final=True)
    for status, count in outbox.items():
        if status != "sent":
            counters.errors[f"outbox mails {status}"] += count
    levels = stack.log_levels()
    stack.stop()
    receiver.shutdown()
    sink.stop()

    warm_up = ran / 4
    late = [s for s in samples if s["t"] >= warm_up]
    roles = sorted({role for sample in samples for role in sample["rss"]})
    slopes = {role: slope_mib_per_hour([(s["t"], s["rss"][role]) for s in late if role in s["rss"]]) for role in roles}
    minutes = ran / 60
    warnings_late = sum(late[-1]["levels"][lv] - late[0]["levels"][lv] for lv in LEVELS[2:]) if len(late) > 1 else 0
    unaccounted = final["missing"] + final["dead_without_reason"] + sum(
        count for state, count in final["states"].items() if state not in ("done", "dead"))
    errors = sum(counters.errors.values())
    print("\nRSS slope after warm-up (MiB/hour): " + ", ".join(f"{r} {s:+.1f}" for r, s in slopes.items()))
    print("log lines per minute: " + ", ".join(f"{lv} {levels[lv] / minutes:.1f}" for lv in LEVELS if levels[lv]))
    print(f"WARNING and above after warm-up: {warnings_late}")
    for line in stack.warnings():
        print("  " + line[:200])
    print(f"most cleanups owed at a sample: {max(s['owed'] for s in samples)}")
    print(f"errors: {errors} {dict(counters.errors) if errors else ''}")
    print(f"counts: {dict(counters.counts)}; outbox: {outbox}")
    print(f"mailboxes: {final['states']}, unaccounted for: {unaccounted}")
    chart(samples, warm_up)
    worst = max(slopes.items(), key=lambda item: item[1])
    record("soak", command_line(),
           f"{minutes:.0f} min, {counters.counts['mailboxes'] / ran:.1f} mailboxes/s, "
           f"{counters.counts['api requests'] / ran:.0f} API req/s, {counters.counts['mail in'] / ran:.1f} mails in/s; "
           f"RSS slope worst {worst[0]} {worst[1]:+.1f} MiB/h ("
           + ", ".join(f"{r} {s:+.1f}" for r, s in slopes.items()) + "); "
           f"WARNING+ after warm-up {warnings_late / (minutes * 0.75):.2f}/min; "
           f"max owed {max(s['owed'] for s in samples)}; errors {errors} (answers after a mailbox's end, "
           f"not errors: {counters.counts[AFTER_END_410]} 410, {counters.counts[AFTER_END_550]} 550); "
           f"unaccounted {unaccounted} "
           f"of {len(load.ids)} ({', '.join(f'{k} {v}' for k, v in sorted(final['states'].items()))})")
    if errors or unaccounted or warnings_late:
        sys.exit(1)


if __name__ == "__main__":
    setup_django()
    main()
