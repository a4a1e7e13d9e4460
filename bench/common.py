"""What the benchmarks share: a fresh database, worker processes, RSS, result rows.

Run the benchmarks through `scripts/bench.sh NAME` (or `make bench-NAME`), which makes
sure PostgreSQL and Redis are up and points DATABASE_URL at a scratch database."""
import atexit
import contextlib
import datetime
import fcntl
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "var" / "bench"
RESULTS = ROOT / "docs" / "benchmarks.md"


def fresh_database() -> None:
    """Drop and recreate the scratch database named in DATABASE_URL, then migrate."""
    import psycopg2
    from urllib.parse import urlsplit

    url = urlsplit(os.environ["DATABASE_URL"])
    name = url.path.lstrip("/")
    assert name.startswith("relay_bench"), "benchmarks only ever drop a relay_bench* database"
    admin = psycopg2.connect(host=url.hostname, port=url.port or 5432, user=url.username or "postgres", dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cursor.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    setup_django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()


def bench_addresses(count: int = 50) -> list[str]:
    """The addresses of `count` hour-long mailboxes of a new pro account, made as the API
    makes them: the recipients of the SMTP benchmarks."""
    from accounts.services import account_create_with_key
    from mailboxes.lifecycle import mailbox_create
    from accounts.identity import Caller
    from relay.backends import get_backend

    owner, _ = account_create_with_key(login="bench", plan="pro")
    return [mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=None, domain=None,
                           ttl_ms=3_600_000)[0].address for _ in range(count)]


_spawned: list[subprocess.Popen] = []


def spawn(name: str, args: list[str], *, env: dict | None = None, ready: str | None = None) -> subprocess.Popen:
    """Start a process in its own session; every one still running is stopped at exit."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.log"
    proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    proc.log = log
    _spawned.append(proc)
    if ready:
        wait_until(lambda: ready in log.read_text(errors="replace") or proc.poll() is not None, 60, f"{name} to start")
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited:\n{log.read_text(errors='replace')[-2000:]}")
    return proc


def celery_worker(name: str, *, env: dict | None = None, queues: str | None = None, concurrency: int = 1) -> subprocess.Popen:
    args = [sys.executable, "-m", "celery", "-A", "config", "worker", "-I", "bench.tasks", "-P", "prefork",
            "-c", str(concurrency), "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
            "-l", "INFO"]
    if queues:
        args += ["-Q", queues]
    return spawn(name, args, env=env, ready=" ready.")


def stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
    return value


def rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants, in MiB."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/status") as status:
                total += int(re.search(r"VmRSS:\s+(\d+)", status.read()).group(1))
            with open(f"/proc/{current}/task/{current}/children") as children:
                stack += [int(child) for child in children.read().split()]
        except (FileNotFoundError, AttributeError, ProcessLookupError):
            pass
    return total / 1024


def _stat_cpu_seconds(stat: str) -> float:
    """User + system CPU seconds from the text of a /proc/PID/stat."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a process and all its live descendants, in seconds."""
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/stat") as stat:
                total += _stat_cpu_seconds(stat.read())
            with open(f"/proc/{current}/task/{current}/children") as children:
                stack += [int(child) for child in children.read().split()]
        except (FileNotFoundError, IndexError, ProcessLookupError):
            pass
    return total


def postgres_cpu_seconds(database: str | None = None) -> float:
    """CPU time of the PostgreSQL processes that work for this run: the backends (and
    autovacuum workers) of `database` (default DATABASE_URL's), and the server's own
    processes that serve every database (the postmaster, WAL writer, checkpointer,
    background writer). Another database's backends are left out: the machine is shared,
    and other engineers' tests would count as this run's work."""
    database = database or database_name()
    total = 0.0
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
            if not text.rsplit(")", 1)[0].endswith("(postgres"):
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                title = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
            # A backend's title is "postgres: CLUSTER: USER DATABASE HOST(PORT) STATE".
            if _serves_every_database(title) or f" {database} " in f"{title} ":
                total += _stat_cpu_seconds(text)
        except (OSError, ValueError, IndexError):  # not a process, or one that just ended
            pass
    return total


_SHARED_PROCESSES = ("checkpointer", "background writer", "walwriter", "autovacuum launcher",
                     "logical replication launcher", "stats collector", "archiver")


def _serves_every_database(title: str) -> bool:
    return not title.startswith("postgres:") or title.rstrip().endswith(_SHARED_PROCESSES)


def database_name() -> str:
    """The database DATABASE_URL names."""
    from urllib.parse import urlsplit

    return urlsplit(os.environ["DATABASE_URL"]).path.lstrip("/")


def machine() -> str:
    with open("/proc/meminfo") as meminfo:
        mem_kib = int(re.search(r"MemTotal:\s+(\d+)", meminfo.read()).group(1))
    return f"{os.cpu_count()} cores, {mem_kib / 1024 / 1024:.0f} GiB"


def in_threads(work, count: int, who: str) -> float:
    """`work(index)` for each index below `count`, each on a thread of its own, all at once:
    the seconds they took together. SystemExit naming the first failure, if any failed."""
    errors: list[Exception] = []

    def guarded(index: int) -> None:
        try:
            work(index)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(index,)) for index in range(count)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    if errors:
        raise SystemExit(f"{len(errors)} {who} failed: {errors[0]!r}")
    return elapsed


def record(section: str, command: str, figures: str) -> None:
    """Add a row to the results table of `section` in docs/benchmarks.md."""
    marker = f"<!-- results:{section} -->"
    row = f"| {datetime.date.today().isoformat()} | {machine()} | `{command}` | {figures} |"
    text = RESULTS.read_text()
    if marker not in text:
        raise SystemExit(f"{RESULTS} has no {marker} line")
    RESULTS.write_text(text.replace(marker, marker + "\n" + row, 1))
    print(row)


@contextlib.contextmanager
def measuring():
    """Held while a figure is measured: benchmarks of one clone run at once (the curves'
    search fill beside another curve, say) take turns measuring, and neither times its
    figures under the other's load."""
    LOGS.mkdir(parents=True, exist_ok=True)
    with open(LOGS / "measuring.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def get(url: str, key: str, timeout: float = 90) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def hold_idle_waiters(count: int, mailbox_ids: list, key: str, stop_event: threading.Event, *, port: int,
                      staggered: bool = False) -> list:
    """`count` clients of the API at `port`, each re-asking `?wait=60` on a mailbox where
    nothing arrives. `staggered`: each client's first wait lasts a random 1-60 s, so that
    their re-asks spread over the minute as a crowd's would, not all at once."""
    def waiter(mailbox_id, wait: int) -> None:
        while not stop_event.is_set():
            try:
                get(f"http://127.0.0.1:{port}/api/v1/mailboxes/{mailbox_id}/messages?wait={wait}", key)
            except Exception:
                time.sleep(0.5)
            wait = 60
    rng = random.Random(count)
    threads = [threading.Thread(target=waiter, args=(mailbox_ids[i % len(mailbox_ids)],
                                                     rng.randint(1, 60) if staggered else 60), daemon=True)
               for i in range(count)]
    for thread in threads:
        thread.start()
    return threads


def plot_curve(path: Path, title: str, xlabel: str, ylabel: str, series: dict[str, tuple[list, list]]) -> None:
    """One PNG of cost curves: each series (name: xs, ys) as a line with its points, on
    log-log axes (the sizes span decades), the first series Relay's, the others baselines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    for (name, (xs, ys)), style in zip(series.items(), ("o-", "s--", "^:", "d-.")):
        axes.plot(xs, ys, style, label=name)
    axes.set_xscale("symlog" if min(min(xs) for xs, _ in series.values()) <= 0 else "log")
    axes.set_yscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    print(f"wrote {path}")


def command_line() -> str:
    return "scripts/bench.sh " + " ".join([Path(sys.argv[0]).stem] + sys.argv[1:])


atexit.register(lambda: stop(*_spawned))
