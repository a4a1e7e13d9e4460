"""Late is wrong too (docs/architecture.md, "One clock"): with beat's clock five minutes
slow, one worker's five minutes fast and another's five minutes slow (libfaketime, as
tests/test_hosts.py runs them), every mailbox is still deprovisioned within seconds of
its end, by the database's clock. With a mail server as the backend a mailbox not yet
deprovisioned still receives mail there, so a cleanup minutes late is a wrong cleanup."""
import shutil
import statistics

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from core.schedules import SWEEP_TASK_NAME
from mailboxes.models import Mailbox
from tests.conftest import CELERY
from tests.expiry.workers import assert_each_deprovisioned_once_and_never_early, wait_settled
from tests.helpers import make_mailboxes

pytestmark = pytest.mark.workers

MAILBOXES = 60
# The sweep runs every second in the suite, and a mailbox scheduled ahead is left to its
# own task for one interval: with true clocks every cleanup ends within about two seconds.
LATEST_SECONDS = 6


def _skewed(processes, name: str, offset: str, argv: list[str], ready_text: str) -> None:
    processes.start(name, ["faketime", "-f", offset, *argv], ready_text=ready_text)


@pytest.mark.skipif(not shutil.which("faketime"), reason="faketime is not installed (scripts/test.sh installs it)")
def test_beat_and_workers_minutes_off_clean_every_mailbox_within_seconds_of_its_end(processes, stalwart):
    # A beat on a true clock ran the sweep a moment ago: its last run is stored on that clock,
    # five minutes ahead of the slow beat's.
    assert PeriodicTask.objects.filter(name=SWEEP_TASK_NAME).update(last_run_at=timezone.now()) == 1
    _skewed(processes, "beat", "-5m", [*CELERY, "beat", "-l", "INFO", "--pidfile", str(processes.tmp_path / "b.pid"),
                                       "-s", str(processes.tmp_path / "beat-schedule")], "beat: Starting")
    for name, offset in (("fast", "+5m"), ("slow", "-5m")):
        _skewed(processes, name, offset, [*CELERY, "worker", "-P", "prefork", "-c", "2", "-n", f"{name}@%h",
                                          "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"],
                " ready.")
    processes.wait_ready()

    mailboxes = make_mailboxes(MAILBOXES, prefix="clock", first_in=4, spread=3, stalwart=stalwart)
    ids = [m.id for m in mailboxes]
    wait_settled(ids, timeout=60)

    rows = list(Mailbox.objects.filter(id__in=ids))
    assert [m.cleanup_state for m in rows] == ["done"] * MAILBOXES
    assert_each_deprovisioned_once_and_never_early(stalwart, rows)
    lags = sorted((m.cleanup_done_at - m.expires_at).total_seconds() for m in rows)
    print(f"expires_at to done with skewed clocks: median {statistics.median(lags):.2f} s, max {lags[-1]:.2f} s")
    late = [round(lag, 1) for lag in lags if lag > LATEST_SECONDS]
    assert not late, f"{len(late)} of {MAILBOXES} cleanups more than {LATEST_SECONDS} s late: {late[:10]}"
