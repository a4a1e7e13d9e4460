"""The Celery application. Its settings live in config/settings.py under CELERY_*."""
import logging
import os
import threading
import time

from celery import Celery
from celery.signals import after_setup_logger, task_failure, task_retry, task_success, worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Django's system checks run where a deployment starts (`manage.py migrate` runs them; so
# does `manage.py check`). Celery's Django fixup would run them again at every worker's
# start, importing the URLconf and every view for them: about half a second of CPU a
# worker. CELERY_SKIP_CHECKS set empty keeps them.
os.environ.setdefault("CELERY_SKIP_CHECKS", "true")

app = Celery("relay")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

logger = logging.getLogger("relay.celery")


@after_setup_logger.connect
def _quieter_task_logs(logger=None, loglevel=None, **kwargs) -> None:
    """Celery logs every task received and succeeded at INFO: for the sweep that is two
    lines every few seconds saying nothing happened. Relay's own loggers say what a
    task did when it did something; failures are still logged by Celery (ERROR).
    RELAY_LOG_TASKS=true keeps every task's lines."""
    from django.conf import settings

    if not settings.RELAY_LOG_TASKS:
        for name in ("celery.app.trace", "celery.worker.strategy"):
            logging.getLogger(name).setLevel(logging.WARNING)


def _count_task(outcome: str):
    def count(sender=None, **kwargs) -> None:
        from relay.metrics import TASKS

        name = getattr(sender, "name", None) or getattr(kwargs.get("request"), "task", None) or "unknown"
        TASKS.labels(name, outcome).inc()
    return count


# Task runs by outcome for /metrics: success, failure (gave up or raised), retry (will
# run again). The receivers are kept referenced: signals hold them weakly.
_task_counters = {signal: _count_task(outcome) for signal, outcome in
                  ((task_success, "success"), (task_failure, "failure"), (task_retry, "retry"))}
for _signal, _receiver in _task_counters.items():
    _signal.connect(_receiver)


@worker_init.connect
def _count_objects(**kwargs) -> None:
    """A diagnostic: with RELAY_OBJECT_COUNTS_DIR set, the worker's main process counts
    its live objects by type once a minute (the garbage collector's view, which costs
    nothing between counts, unlike tracemalloc, which slowed the main process to a
    crawl under load) and writes the 25 types that grew most since the first minute to
    <dir>/worker-<pid>.txt. How docs/benchmarks.md, "Soak", looked for the main
    process's growth."""
    directory = os.environ.get("RELAY_OBJECT_COUNTS_DIR")
    if not directory:
        return
    import collections
    import gc

    def counts() -> collections.Counter:
        return collections.Counter(type(obj).__qualname__ for obj in gc.get_objects())

    def write_growth() -> None:
        time.sleep(60)
        first, minute = counts(), 1
        path = os.path.join(directory, f"worker-{os.getpid()}.txt")
        while True:
            time.sleep(60)
            minute += 1
            now = counts()
            growth = sorted(((now[name] - first[name], name) for name in now), reverse=True)[:25]
            with open(path, "w") as out:
                out.write(f"minute {minute}: {sum(now.values())} objects; the types that grew most since minute 1\n")
                out.writelines(f"{diff:+8d} {name} ({now[name]})\n" for diff, name in growth)

    threading.Thread(target=write_growth, name="object-counts", daemon=True).start()
