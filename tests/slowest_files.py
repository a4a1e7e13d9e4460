"""The ten slowest test files, printed at the end of every run: a pytest plugin (pytest.ini
loads it with `-p`). A file's time is the sum of setup, call and teardown of its tests;
with pytest-xdist the controller sees every worker's reports, so each line also names the
worker the file ran on and when, from the run's start, it began and ended there. A file
that ends last on one worker while the other waits is what holds the run
(tests/parallel.py starts the longest files first).

With RELAY_TEST_FILE_SECONDS=<path> it also writes every file's seconds there as JSON:
that is how tests/file_seconds.json, which tests/parallel.py schedules by, is refreshed."""
import json
import os
import time
from dataclasses import dataclass

HOW_MANY = 10


@dataclass
class _File:
    seconds: float = 0.0
    tests: int = 0
    worker: str = ""
    first: float = float("inf")
    last: float = 0.0


_files: dict[str, _File] = {}
_started = time.time()


def pytest_sessionstart(session) -> None:
    global _started
    _started = time.time()


def pytest_runtest_logreport(report) -> None:
    path = report.nodeid.split("::", 1)[0]
    entry = _files.setdefault(path, _File())
    entry.seconds += report.duration
    if report.when == "call":
        entry.tests += 1
    node = getattr(report, "node", None)  # xdist's controller: the worker that sent the report
    if node is not None:
        entry.worker = node.gateway.id
    start, stop = getattr(report, "start", None), getattr(report, "stop", None)
    if start is not None and stop is not None:
        entry.first, entry.last = min(entry.first, start), max(entry.last, stop)


def pytest_terminal_summary(terminalreporter, config) -> None:
    if not _files or hasattr(config, "workerinput"):  # only the controller (or a run without xdist) prints
        return
    record = os.environ.get("RELAY_TEST_FILE_SECONDS")
    if record:
        with open(record, "w") as out:
            json.dump({path: round(entry.seconds, 1) for path, entry in sorted(_files.items())}, out, indent=1)
            out.write("\n")
    slowest = sorted(_files.items(), key=lambda item: -item[1].seconds)[:HOW_MANY]
    terminalreporter.write_sep("=", f"{len(slowest)} slowest files (setup + call + teardown)")
    for path, entry in slowest:
        where = f"{entry.worker:>4} " if entry.worker else ""
        span = (f"  (+{entry.first - _started:.0f} s to +{entry.last - _started:.0f} s)"
                if entry.last else "")
        terminalreporter.write_line(f"{entry.seconds:8.1f} s  {where}{entry.tests:4d} tests  {path}{span}")
