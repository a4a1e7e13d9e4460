"""The database's clock decides (core.clock.db_now, docs/architecture.md "One clock"): a
process whose own clock is ten minutes off, fast or slow, neither ends a mailbox early
nor keeps it receiving late. time_machine moves this process's clock (the web views, the
SMTP server thread, the sweep all run in it); PostgreSQL's stays where it is."""
import smtplib
from datetime import timedelta

import pytest
import time_machine

from expiry.sweep import sweep_due_and_lapsed
from mailboxes.models import Mailbox
from core.clock import db_now
from tests.helpers import create_via_api

OFF = timedelta(minutes=10)


def rcpt(server, address: str) -> int:
    with smtplib.SMTP("127.0.0.1", server.port, timeout=10) as smtp:
        smtp.ehlo()
        smtp.mail("a@example.com")
        return smtp.rcpt(address)[0]


@pytest.mark.parametrize("skew", [OFF, -OFF], ids=["fast", "slow"])
def test_a_process_clock_ten_minutes_off_neither_ends_a_mailbox_early_nor_keeps_it_late(client_pro, smtp_server,
                                                                                        skew):
    with time_machine.travel(db_now() + skew, tick=True):
        before = db_now()
        box, unread = (create_via_api(client_pro, ttl_ms=5 * 60_000).json() for _ in range(2))
        both = Mailbox.objects.filter(id__in=[box["id"], unread["id"]])
        # Their five minutes are counted from the database's now, whatever this host says.
        after = db_now()
        assert all(before + timedelta(minutes=5) <= mailbox.expires_at <= after + timedelta(minutes=5)
                   for mailbox in both)
        # Still minutes to live: served, receiving, and left alone by a sweep.
        assert client_pro.get(f"/api/v1/mailboxes/{box['id']}").json()["status"] == "active"
        assert rcpt(smtp_server, box["address"]) == 250
        assert sweep_due_and_lapsed().expired == 0
        # Their end has come by the database's clock: refused at RCPT, shown expired, and
        # the one nobody touched is expired by a sweep.
        both.update(expires_at=db_now() - timedelta(seconds=1))
        assert rcpt(smtp_server, box["address"]) == 550
        assert client_pro.get(f"/api/v1/mailboxes/{box['id']}").json()["status"] == "expired"
        assert sweep_due_and_lapsed().expired == 1
        assert [(m.status, m.cleanup_state) for m in both] == [("expired", "pending")] * 2
