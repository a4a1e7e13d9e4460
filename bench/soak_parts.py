"""The soak's outside parts (bench/soak.py): its counters, the webhook receiver and the
SMTP sink it points Relay at, what it reads of the database, and the RSS slope and chart
it reports."""
import collections
import datetime
import json
import re
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from urllib3.util.retry import Retry

from bench.common import ROOT

CHART = ROOT / "docs" / "soak-rss.png"
# A short life can end before the client's next step: a 410 or a 550 after that end is the
# right answer, counted apart from errors (before the end either is an error).
AFTER_END_410 = "answered 410 after the mailbox's end"
AFTER_END_550 = "refused at RCPT (550) after the mailbox's end"


def ends_at(box: dict) -> float:
    """When a mailbox's life ends, from its API representation (epoch seconds)."""
    return datetime.datetime.fromisoformat(box["expires_at"].replace("Z", "+00:00")).timestamp()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Counters:
    def __init__(self):
        self._lock = threading.Lock()
        self.counts = collections.Counter()
        self.errors = collections.Counter()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] += n

    def error(self, what: str, detail: str = "") -> None:
        with self._lock:
            self.errors[what] += 1
        if sum(self.errors.values()) <= 20:
            print(f"error: {what} {detail}".rstrip(), file=sys.stderr)


class CountingRetry(Retry):
    counters: Counters

    def increment(self, *args, **kwargs):
        self.counters.add("GETs sent again after a closed keep-alive connection")
        new = super().increment(*args, **kwargs)
        new.counters = self.counters
        return new


def webhook_receiver(counters: Counters) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            counters.add("webhook:" + json.loads(body)["type"])
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def smtp_sink(counters: Counters):
    """The mailer's destination: an aiosmtpd server that counts what it is handed."""
    from aiosmtpd.controller import Controller

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            counters.add("mail out delivered")
            return "250 OK"

    controller = Controller(Handler(), hostname="127.0.0.1", port=free_port())
    controller.start()
    return controller


def slope_mib_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB), in MiB per hour."""
    n = len(points)
    if n < 2:
        return float("nan")
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / var * 3600 if var else float("nan")


def chart(samples: list[dict], warm_up: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roles = sorted({role for sample in samples for role in sample["rss"]})
    figure, axes = plt.subplots(figsize=(9, 4.5), dpi=100)
    for role in roles:
        points = [(s["t"] / 60, s["rss"][role]) for s in samples if role in s["rss"]]
        axes.plot([p[0] for p in points], [p[1] for p in points], label=role, linewidth=1.5)
    axes.axvline(warm_up / 60, color="grey", linestyle=":", linewidth=1)
    axes.text(warm_up / 60, axes.get_ylim()[1], " slopes from here", va="top", fontsize=8, color="grey")
    axes.set_xlabel("minutes")
    axes.set_ylabel("RSS (MiB)")
    axes.set_title("Relay soak: resident memory of each process")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.tight_layout()
    figure.savefig(CHART)
    print(f"chart: {CHART.relative_to(ROOT)}")


def rss_mib(pid: int) -> float | None:
    try:
        return int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1)) / 1024
    except (FileNotFoundError, AttributeError, ProcessLookupError):
        return None


# --- what the soak reads of the database --------------------------------------------------------
def account_key() -> str:
    from accounts.services import account_create_with_key

    _, key = account_create_with_key(login="soak", plan="enterprise")
    return key


def accounted(ids: list[str]) -> dict:
    from mailboxes.models import Mailbox

    rows = Mailbox.objects.filter(id__in=ids)
    states = collections.Counter(rows.values_list("cleanup_state", flat=True))
    dead_without_reason = rows.filter(cleanup_state="dead", cleanup_last_error="").count()
    return {"states": dict(states), "missing": len(ids) - rows.count(), "dead_without_reason": dead_without_reason}


def outbox_settled(final: bool = False) -> dict | None:
    """The outbox mails by status once none is queued or sending (or at once if final)."""
    from relay.models import OutboxMail

    statuses = collections.Counter(OutboxMail.objects.values_list("status", flat=True))
    return dict(statuses) if final or not (statuses["queued"] or statuses["sending"]) else None


def owed() -> int:
    from mailboxes.models import Mailbox

    return Mailbox.objects.filter(cleanup_state__in=("pending", "running")).count()
