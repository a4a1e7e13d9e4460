"""The SMTP server under abuse: parser bombs answered fast and never delaying another
session, one copy of a DATA for all its recipients, the storage quota, a storage
deadline, storage time not taken for idleness, connection caps, a neutral banner."""
import os
import smtplib
import socket
import subprocess
import sys
import threading
import time

import pytest
from django.db import connection, connections

from mailboxes.models import Message, MessageContent
from relay.inbound import server as relay_smtp
from mailboxes.mail_format import parse_message
from tests.conftest import _test_database_url
from tests.helpers import ROOT, create_via_api, free_port, wait_until

BOMBS = {
    "5,000 repeated headers": b"X: v\r\n" * 5000 + b"\r\nx\r\n",
    "40,000 MIME parts": b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'
                         + b"--b\r\nContent-Type: text/plain\r\n\r\nx\r\n" * 40_000 + b"--b--\r\n",
    "1 MB of header folding": b"Subject: a\r\n" + b" folded\r\n" * (1024 * 1024 // 9) + b"\r\nbody\r\n",
}


def connect(port: int) -> smtplib.SMTP:
    smtp = smtplib.SMTP("127.0.0.1", port, timeout=30)
    smtp.ehlo()
    return smtp


def test_the_repro_of_repeated_headers_parses_in_linear_time():
    started = time.monotonic()
    parsed = parse_message(b"X: v\r\n" * 500 + b"\r\nx")
    # A guard against the quadratic parse it once was (seconds); a linear one takes milliseconds.
    assert time.monotonic() - started < 2
    assert len(parsed.headers) == 500


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_bomb_is_parsed_within_the_budget_and_flagged(name):
    started = time.monotonic()
    parsed = parse_message(BOMBS[name])
    # The parser stops reading parts after PARSE_SECONDS (1 s); without that cap a bomb
    # takes minutes. The bound is the cap with room for a slow machine.
    assert time.monotonic() - started < 10
    assert parsed.parsed_fully is False


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_bomb_over_smtp_is_answered_within_two_seconds_and_stored_raw(smtp_server, new_box, name):
    mailbox = new_box(local_part="bomb")
    with connect(smtp_server.port) as smtp:
        started = time.monotonic()
        assert smtp.sendmail("a@example.com", [mailbox["address"]], BOMBS[name]) == {}
        # The parse cap (1 s) with room for a slow machine; an uncapped bomb takes minutes.
        assert time.monotonic() - started < 10
    content = MessageContent.objects.get(messages__mailbox_id=mailbox["id"])
    assert bytes(content.raw) == BOMBS[name] and content.parsed_fully is False


def test_eight_bombs_in_flight_do_not_delay_another_delivery(smtp_server, new_box):
    victims, bystander = new_box(local_part="victim"), new_box(local_part="bystander")
    bomb = BOMBS["5,000 repeated headers"] * 1  # the slowest for our parser per byte
    start = threading.Barrier(9)
    errors = []

    def send_bomb() -> None:
        try:
            with connect(smtp_server.port) as smtp:
                start.wait(10)
                smtp.sendmail("a@example.com", [victims["address"]], bomb)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send_bomb) for _ in range(8)]
    [thread.start() for thread in threads]
    with connect(smtp_server.port) as smtp:
        start.wait(10)
        started = time.monotonic()
        assert smtp.sendmail("b@example.com", [bystander["address"]], b"Subject: hi\r\n\r\nhello\r\n") == {}
        elapsed = time.monotonic() - started
    [thread.join(30) for thread in threads]
    assert errors == []
    # A guard against a server that parses on its event loop, one bomb after another (each
    # up to the 1 s parse cap): how fast the bystander is served is bench/smtp_ingest's.
    assert elapsed < 8, f"a normal delivery took {elapsed:.2f} s beside eight bombs"
    assert Message.objects.filter(mailbox_id=victims["id"]).count() == 8


LINES_1500 = b"x" * 98 + b"\r\n" * 1 + (b"x" * 98 + b"\r\n") * 14


def test_a_full_mailbox_is_refused_with_552_5_2_2(smtp_server, new_box, settings):
    settings.RELAY_QUOTAS = {**settings.RELAY_QUOTAS,
                             "pro": {**settings.RELAY_QUOTAS["pro"], "stored_bytes_per_mailbox": 2000}}
    mailbox = new_box(local_part="full")
    second = b"Subject: 2\r\n\r\n" + LINES_1500
    with connect(smtp_server.port) as smtp:
        assert smtp.sendmail("a@example.com", [mailbox["address"]], b"Subject: 1\r\n\r\n" + LINES_1500) == {}
        # A second one that would go over: refused at DATA when its size was not declared ...
        assert smtp.mail("a@example.com")[0] == 250
        assert smtp.rcpt(mailbox["address"])[0] == 250
        code, reply = smtp.data(second)
        assert (code, reply[:5]) == (552, b"5.2.2")
        smtp.rset()
        # ... and at RCPT when MAIL FROM declared it (SIZE=), as smtplib does.
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            smtp.sendmail("a@example.com", [mailbox["address"]], second)
        assert refused.value.recipients[mailbox["address"]] == (552, b"5.2.2 Mailbox full")
    assert Message.objects.filter(mailbox_id=mailbox["id"]).count() == 1


def test_storage_that_misses_its_deadline_is_451_and_keeps_nothing(smtp_server, new_box, settings):
    settings.RELAY_SMTP_STORE_SECONDS = 1
    mailbox = new_box(local_part="locked")
    # Another transaction holds the mailbox row, so the store's UPDATE waits past its deadline.
    holder = connections.create_connection("default")
    with holder.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT id FROM mailboxes_mailbox WHERE id = %s FOR UPDATE", [mailbox["id"]])
        try:
            with connect(smtp_server.port) as smtp:
                with pytest.raises(smtplib.SMTPDataError) as refused:
                    smtp.sendmail("a@example.com", [mailbox["address"]], b"Subject: s\r\n\r\nbody\r\n")
        finally:
            cursor.execute("ROLLBACK")
    holder.close()
    assert refused.value.smtp_code == 451
    assert not Message.objects.filter(mailbox_id=mailbox["id"]).exists()
    assert not MessageContent.objects.exists()


def test_storage_time_is_not_idle_time(smtp_server, new_box, settings, monkeypatch):
    settings.RELAY_SMTP_IDLE_SECONDS = 1
    mailbox = new_box(local_part="slowstore")
    deliver = relay_smtp.message_ingest

    def slow_deliver(**kwargs):
        time.sleep(2.5)  # a store slower than the idle timeout: the slowness under test
        return deliver(**kwargs)

    monkeypatch.setattr(relay_smtp, "message_ingest", slow_deliver)
    with connect(smtp_server.port) as smtp:
        assert smtp.sendmail("a@example.com", [mailbox["address"]], b"Subject: s\r\n\r\nbody\r\n") == {}
    assert Message.objects.filter(mailbox_id=mailbox["id"]).count() == 1


def test_connections_per_client_are_capped(smtp_server, settings):
    settings.RELAY_SMTP_MAX_CONNECTIONS_PER_CLIENT = 2
    held = [connect(smtp_server.port) for _ in range(2)]
    refused = socket.create_connection(("127.0.0.1", smtp_server.port), timeout=5)
    assert refused.recv(200).startswith(b"421 4.7.0")
    refused.close()
    for smtp in held:
        smtp.quit()
    wait_until(lambda: len(relay_smtp.RelaySMTP.sessions) == 0, timeout=5, message="the sessions to close")
    assert connect(smtp_server.port).noop()[0] == 250


def test_the_banner_does_not_advertise_the_software(smtp_server):
    with socket.create_connection(("127.0.0.1", smtp_server.port), timeout=5) as raw:
        banner = raw.recv(200)
    assert banner.startswith(b"220 ") and b"Python" not in banner and b"Relay" in banner


@pytest.mark.workers
def test_one_data_to_fifty_mailboxes_is_stored_once_and_smtp_memory_stays_flat(transactional_db, client_pro):
    addresses = [create_via_api(client_pro, local_part=f"fan{i}").json()["address"] for i in range(50)]
    body = os.urandom(9 * 1024 * 1024 // 2).hex().encode()  # 9 MB that no database compresses
    raw = b"Subject: big\r\n\r\n" + b"\r\n".join(body[i:i + 76] for i in range(0, len(body), 76)) + b"\r\n"
    port, server = start_runsmtp()
    try:
        def database_bytes() -> int:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_total_relation_size('mailboxes_messagecontent')"
                               " + pg_total_relation_size('mailboxes_message')")
                return cursor.fetchone()[0]

        before = database_bytes()
        with connect(port) as smtp:
            assert smtp.sendmail("a@example.com", addresses, raw) == {}
        grown = database_bytes() - before
        peak_mb = _peak_rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(30)
    assert Message.objects.count() == 50 and MessageContent.objects.count() == 1
    # One copy of the bytes, plus the parsed text (capped at 1 MB) and the 50 small rows.
    assert grown < 1.3 * len(raw), f"the database grew by {grown / 1e6:.1f} MB for one {len(raw) / 1e6:.1f} MB DATA"
    assert peak_mb < 300, f"runsmtp peaked at {peak_mb:.0f} MB"


def start_runsmtp(log=subprocess.DEVNULL, env: dict | None = None, port: int | None = None,
                  reuse_port: bool = False) -> tuple[int, subprocess.Popen]:
    """`manage.py runsmtp` in a process of its own, on the test database; once it answers
    (with `reuse_port`, once it says it listens: another process may answer already)."""
    port = port or free_port()
    env = {**os.environ, "DATABASE_URL": _test_database_url(), "PYTHONUNBUFFERED": "1", **(env or {})}
    server = subprocess.Popen([sys.executable, "manage.py", "runsmtp", "--port", str(port),
                               *(["--reuse-port"] if reuse_port else [])], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    wait_until(lambda: _answers(port) or server.poll() is not None, timeout=30, message="runsmtp")
    assert server.poll() is None, "runsmtp exited"
    return port, server


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.workers
def test_runsmtp_stops_promptly_on_sigterm_with_a_bomb_in_flight(transactional_db, client_pro):
    address = create_via_api(client_pro, local_part="sigterm").json()["address"]
    port, server = start_runsmtp()
    try:
        smtp = connect(port)
        smtp.mail("a@example.com")
        smtp.rcpt(address)
        sender = threading.Thread(target=lambda: _data_ignoring_errors(smtp, BOMBS["40,000 MIME parts"]), daemon=True)
        sender.start()  # SIGTERM lands while the bomb is sent, parsed or stored
        server.terminate()
        started = time.monotonic()
        server.wait(25)
        # A guard below the 30 s drain: the bomb's parse is capped at 1 s, so a server
        # that waited out its whole drain, or hung, is the only way past it.
        assert time.monotonic() - started < 20
    finally:
        if server.poll() is None:
            server.kill()


def _data_ignoring_errors(smtp, raw: bytes) -> None:
    try:
        smtp.data(raw)
    except (smtplib.SMTPException, OSError):
        pass


# --- several processes on one port (SO_REUSEPORT) ------------------------------------------
def _connections_on(pid: int, port: int) -> int:
    """Established TCP connections to local `port` that process `pid` holds. Counted by
    socket inode from /proc/net/tcp, so the process's other sockets (its database and
    Redis connections, which come and go) do not count."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                    inodes.add(fields[9])
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        count += target.startswith("socket:[") and target[8:-1] in inodes
    return count


def two_runsmtp_on_one_port(tmp_path, env: dict | None = None) -> tuple[int, list[subprocess.Popen]]:
    """Two `runsmtp --reuse-port` on one port, as a process manager would start them."""
    port, first = start_runsmtp(log=(tmp_path / "smtp-1.log").open("wb"), env=env, reuse_port=True)
    _, second = start_runsmtp(log=(tmp_path / "smtp-2.log").open("wb"), env=env, reuse_port=True, port=port)
    wait_until(lambda: all("SMTP listening" in (tmp_path / f"smtp-{n}.log").read_text() for n in (1, 2)),
               timeout=30, message="two SMTP processes listening")
    return port, [first, second]


def stop(servers: list[subprocess.Popen]) -> None:
    for server in servers:
        if server.poll() is None:
            server.terminate()
    for server in servers:
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.mark.workers
def test_several_processes_share_the_port_and_store_every_message(transactional_db, client_pro, tmp_path):
    address = create_via_api(client_pro, local_part="shared").json()["address"]
    # Twenty connections from one address: more than one client may hold by default.
    port, servers = two_runsmtp_on_one_port(tmp_path, env={"RELAY_SMTP_MAX_CONNECTIONS_PER_CLIENT": "20"})
    try:
        # Twenty connections held open at once: the kernel spreads them over both processes.
        held = [connect(port) for _ in range(20)]
        wait_until(lambda: sum(_connections_on(server.pid, port) for server in servers) == 20, timeout=10,
                   message="the twenty connections to be accepted")
        assert all(_connections_on(server.pid, port) > 0 for server in servers), "one process took every connection"
        for number, smtp in enumerate(held):
            assert smtp.sendmail("a@example.com", [address], f"Subject: m{number}\r\n\r\nhello\r\n".encode()) == {}
            smtp.quit()
    finally:
        stop(servers)
    subjects = sorted(Message.objects.filter(mailbox__address=address).values_list("subject", flat=True))
    assert subjects == sorted(f"m{number}" for number in range(20))


@pytest.mark.workers
def test_a_killed_smtp_process_leaves_the_port_served_by_the_others(transactional_db, client_pro, tmp_path):
    """Restarting it is the process manager's job; meanwhile the others take its share."""
    address = create_via_api(client_pro, local_part="replaced").json()["address"]
    port, (first, second) = two_runsmtp_on_one_port(tmp_path)
    try:
        first.kill()
        first.wait(10)
        for number in range(5):  # new connections: none may land on the dead process
            with connect(port) as smtp:
                assert smtp.sendmail("a@example.com", [address], f"Subject: after{number}\r\n\r\nok\r\n".encode()) == {}
        second.terminate()
        second.wait(15)
    finally:
        stop([first, second])
    assert Message.objects.filter(mailbox__address=address, subject__startswith="after").count() == 5


def test_without_reuse_port_a_taken_port_is_an_error(transactional_db, tmp_path):
    port, server = start_runsmtp()
    try:
        second = subprocess.run([sys.executable, "manage.py", "runsmtp", "--port", str(port)], cwd=ROOT,
                                env={**os.environ, "DATABASE_URL": _test_database_url()},
                                capture_output=True, text=True, timeout=60)
        assert second.returncode != 0 and f"cannot listen on 127.0.0.1:{port}" in second.stderr
    finally:
        stop([server])


def test_one_ipv6_block_counts_as_one_client():
    from core.client_address import client_group

    assert client_group("2001:db8:1:2::1") == client_group("2001:db8:1:2:ffff:ffff:ffff:fffe")
    assert client_group("2001:db8:1:2::1") != client_group("2001:db8:1:3::1")
    assert client_group("::ffff:192.0.2.7") == client_group("192.0.2.7") == "192.0.2.7"
    assert client_group("192.0.2.7") != client_group("192.0.2.8")


@pytest.mark.workers
def test_a_message_answered_250_survives_a_kill_9_right_after_the_answer(transactional_db, client_pro):
    """250 is said only after the commit: killing the process the instant the client hears
    it loses nothing (three times over, a fresh process each time)."""
    address = create_via_api(client_pro, local_part="durable").json()["address"]
    for round_ in range(3):
        port, server = start_runsmtp()
        with connect(port) as smtp:
            smtp.mail("a@example.com")
            smtp.rcpt(address)
            code, _ = smtp.data(f"Subject: kept {round_}\r\n\r\nanswered, then killed\r\n".encode())
            server.kill()  # SIGKILL, before the client so much as says QUIT
            server.wait(10)
            assert code == 250
        assert Message.objects.filter(mailbox__address=address, subject=f"kept {round_}").count() == 1
