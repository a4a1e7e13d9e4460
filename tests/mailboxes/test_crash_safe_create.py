"""Creating a mailbox is crash-safe (docs/architecture.md): the row exists, `provisioning` and leased,
before the backend is asked for anything, so a web process killed at any point leaves
nothing on the backend that no Relay row owns. And `reconcile` finds what came before."""
import json
import threading
import urllib.request
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from expiry.sweep import sweep_due_and_lapsed
from mailboxes.models import AddressReservation, Mailbox
from tests.helpers import create_via_api, earlier, free_port, make_mailbox, wait_until

pytestmark = pytest.mark.workers

# The web process's clocks: a short cleanup lease and Stalwart read timeout, so its
# provisioning lease (lease + 4 requests x (connect + read)) lapses in 16 s.
WEB_ENV = {"RELAY_CLEANUP_LEASE_SECONDS": "4", "STALWART_CONNECT_TIMEOUT_SECONDS": "1",
           "STALWART_READ_TIMEOUT_SECONDS": "2"}


def post_create_in_background(port: int, local_part: str) -> threading.Thread:
    """POST /api/v1/mailboxes to the web process from a thread; the process will be
    killed under it, so its answer (or the lack of one) does not matter."""
    def post() -> None:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/mailboxes", method="POST",
                                         data=json.dumps({"local_part": local_part}).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=30).read()
        except OSError:
            pass

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread


def settled(address: str) -> Mailbox | None:
    return Mailbox.objects.filter(address=address, cleanup_state="done").first()


@pytest.mark.parametrize("killed_during", ["create", "discovery"])
def test_a_web_process_killed_mid_provision_leaves_no_account_without_an_owner(processes, stalwart, killed_during):
    """`create`: killed while the backend is creating the account (it appears after the
    kill). `discovery`: killed after the row's insert, before the create call went out."""
    port = free_port()
    processes.web("web", port, env=WEB_ENV)
    processes.worker("worker")
    processes.beat("beat")
    processes.wait_ready()
    stalwart.create_delay = 1.5 if killed_during == "create" else 0
    stalwart.discovery_delay = 0.9 if killed_during == "discovery" else 0
    address = f"crash-{killed_during}@relay.localhost"

    post_create_in_background(port, address.split("@")[0])
    started = "creates_started" if killed_during == "create" else "discoveries_started"
    wait_until(lambda: getattr(stalwart, started) >= 1, timeout=30, interval=0.01, message=f"the {killed_during} call")
    processes.kill("web")
    row = Mailbox.objects.get(address=address)
    assert row.status == "provisioning"  # the intent was written before the call

    # After the lease lapses, a sweep gives up on it and a worker deprovisions.
    done = wait_until(lambda: settled(address), timeout=60, interval=0.2, message="the abandoned mailbox's cleanup")
    assert done.status == "deleted"
    assert stalwart.accounts == {}, "an account was left on the backend with no Relay row owning it"
    if killed_during == "create":  # the account did appear after the kill, and was removed
        assert stalwart.creates_started == 1 and stalwart.destroyed_names() == ["crash-create"]
    else:  # no create ever went out
        assert stalwart.creates_started == 0 and stalwart.destroyed_names() == []
    assert AddressReservation.objects.filter(address=address).exists()  # never handed out again


def test_a_lapsed_provisioning_is_invisible_and_then_owes_a_deprovision(client_pro, stalwart, settings):
    row = make_mailbox("limbo", status="provisioning", provision_lease_until=timezone.now() + timedelta(seconds=30))
    assert client_pro.get(f"/api/v1/mailboxes/{row.id}").status_code == 404
    assert sweep_due_and_lapsed().abandoned == 0  # its creator may still be at work
    earlier(Mailbox.objects.filter(id=row.id), timedelta(seconds=31), "provision_lease_until")
    assert sweep_due_and_lapsed().abandoned == 1
    row.refresh_from_db()
    assert (row.status, row.cleanup_state) == ("deleted", "pending")


def test_smtp_refuses_a_mailbox_still_provisioning(db):
    from mailboxes.messages import recipient_by_address

    make_mailbox("notyet", status="provisioning", provision_lease_until=timezone.now() + timedelta(seconds=30))
    assert recipient_by_address("notyet@relay.localhost") is None


def test_a_create_that_timed_out_waits_before_its_undo(client_pro, stalwart, settings):
    # A timeout may hide a create the backend still finishes: the undo is not run at
    # once, but after the longest a provision call can take.
    from tests.stalwart_fake import TIMEOUT

    stalwart.fail(TIMEOUT)
    before = timezone.now()
    assert create_via_api(client_pro, local_part="slow").status_code == 503
    row = Mailbox.objects.get(address="slow@relay.localhost")
    from relay.backends.stalwart import PROVISION_REQUESTS_MAX

    provision_max = PROVISION_REQUESTS_MAX * sum(settings.STALWART_TIMEOUT)
    assert row.cleanup_lease_until >= before + timedelta(seconds=provision_max + settings.RELAY_CLEANUP_LEASE_SECONDS)


# --- reconcile ---------------------------------------------------------------------------
def test_reconcile_lists_and_destroys_exactly_the_orphans(db, stalwart, capsys):
    owned = [make_mailbox(f"owned{i}", stalwart=stalwart) for i in range(970)]
    orphans = {f"orphan{i}@relay.localhost" for i in range(30)}
    for address in orphans:
        stalwart.add_account(address.split("@")[0])
    assert len(stalwart.accounts) == 1000

    call_command("reconcile")
    out = capsys.readouterr().out
    listed = {line.split()[1] for line in out.splitlines() if "@" in line}
    assert listed == orphans
    assert "30 orphan account(s)" in out
    assert max(size for method, size in stalwart.calls if method == "query page") <= 500  # paged, not all at once

    call_command("reconcile", "--destroy")
    assert "destroyed 30, failed 0" in capsys.readouterr().out
    assert sorted(f"{name}@relay.localhost" for name in stalwart.destroyed_names()) == sorted(orphans)
    assert len(stalwart.accounts) == len(owned)

    call_command("reconcile")
    assert "0 orphan account(s)" in capsys.readouterr().out


def test_reconcile_counts_a_mailbox_whose_cleanup_is_owed_as_owned(db, stalwart, capsys):
    make_mailbox("ending", stalwart=stalwart, status="expired", cleanup_state="pending")
    make_mailbox("cleaned", stalwart=stalwart, status="expired", cleanup_state="done")  # account came back
    call_command("reconcile")
    out = capsys.readouterr().out
    assert "cleaned@relay.localhost" in out and "ending@relay.localhost" not in out


def test_reconcile_on_the_local_backend_says_there_is_nothing_to_reconcile(db, capsys):
    call_command("reconcile")
    assert "Nothing to reconcile" in capsys.readouterr().out


def test_reconcile_refuses_a_domain_relay_does_not_serve(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="RELAY_DOMAINS"):
        call_command("reconcile", "--domain", "example.com")


def test_the_daily_reconcile_task_reports_the_orphan_count(db, stalwart):
    from relay.tasks import reconcile_report

    make_mailbox("kept", stalwart=stalwart)
    stalwart.add_account("stray")
    assert reconcile_report.apply().result == 1


# --- a mail server's own accounts are never taken (SECURITY.md, "A mail server as the backend") --
def test_an_account_relay_did_not_create_is_409_and_left_alone_on_stalwart(api, stalwart):
    theirs = stalwart.add_account("carol", description="the operator's own")
    response = create_via_api(api, local_part="carol")
    assert response.status_code == 409 and response.json()["code"] == "conflict"
    row = Mailbox.objects.get(address="carol@relay.localhost")
    assert (row.status, row.cleanup_state, row.backend_id) == ("deleted", "done", "")
    assert stalwart.accounts[theirs]["description"] == "the operator's own"
    assert stalwart.destroyed_names() == []


def test_stalwarts_admin_name_is_never_handed_out(api, stalwart):
    response = create_via_api(api, local_part="admin")
    assert response.status_code == 400 and "local_part" in response.json()["fields"]
    assert not Mailbox.objects.filter(address="admin@relay.localhost").exists()


def test_a_deprovision_by_name_leaves_an_account_another_mailbox_made(db, stalwart):
    from relay.backends import NotMadeByRelay, get_backend

    stalwart.add_account("lost", description="Relay disposable mailbox 00000000-0000-0000-0000-000000000000")
    mailbox = make_mailbox("lost", backend_id="")  # its create's answer never came
    with pytest.raises(NotMadeByRelay):
        get_backend().deprovision(mailbox)
    assert stalwart.destroyed_names() == []


def test_reconcile_neither_lists_nor_destroys_accounts_relay_did_not_make(db, stalwart, capsys):
    stalwart.add_account("operator", description="")
    stalwart.add_account("relays-orphan")
    call_command("reconcile", "--destroy")
    out = capsys.readouterr().out
    assert "relays-orphan@relay.localhost" in out and "operator@" not in out
    assert stalwart.destroyed_names() == ["relays-orphan"]
