"""What the benchmarks share: a fresh database, worker processes, RSS, result rows.

Run the benchmarks through `scripts/bench.sh NAME` (or `make bench-NAME`), which makes
sure PostgreSQL and Redis are up and points DATABASE_URL at a scratch database."""
import atexit
import datetime
import os
import re
import signal
import subprocess
import sys
import time
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
    """CPU time of every PostgreSQL process on this machine (the server and its backends),
    or, given `database`, of the backends connected to it alone: on a machine shared with
    other benchmarks, theirs are not this run's. (A backend that exits meanwhile takes
    its CPU with it: count only where connections are kept.)"""
    total = 0.0
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
            if not text.rsplit(")", 1)[0].endswith("(postgres"):
                continue
            if database is not None:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:  # "postgres: [CLUSTER: ]USER DATABASE HOST(PORT) STATE"
                    if database.encode() not in cmdline.read().split():
                        continue
            total += _stat_cpu_seconds(text)
        except (OSError, ValueError, IndexError):  # not a process, or one that just ended
            pass
    return total


def machine() -> str:
    with open("/proc/meminfo") as meminfo:
        mem_kib = int(re.search(r"MemTotal:\s+(\d+)", meminfo.read()).group(1))
    return f"{os.cpu_count()} cores, {mem_kib / 1024 / 1024:.0f} GiB"


def record(section: str, command: str, figures: str) -> None:
    """Add a row to the results table of `section` in docs/benchmarks.md."""
    marker = f"<!-- results:{section} -->"
    row = f"| {datetime.date.today().isoformat()} | {machine()} | `{command}` | {figures} |"
    text = RESULTS.read_text()
    if marker not in text:
        raise SystemExit(f"{RESULTS} has no {marker} line")
    RESULTS.write_text(text.replace(marker, marker + "\n" + row, 1))
    print(row)


def command_line() -> str:
    return "scripts/bench.sh " + " ".join([Path(sys.argv[0]).stem] + sys.argv[1:])


atexit.register(lambda: stop(*_spawned))
