"""A sandbox's fault rules (docs/sandbox.md, "Faults"), set through the API and answered by
the submission port to real senders: a 451 at RCPT twice then accepted, a probability
within its binomial bounds, `times` spent once across two SMTP processes, a faulted
message not stored, a fault at AUTH that is no failure."""
import smtplib
import threading

import pytest

from mailboxes.models import Message
from relay.inbound.submission import FAILURES_ALLOWED
from tests.conftest import SmtpServerThread
from tests.helpers import create_mailbox
from tests.relay.inbound.test_smtp_limits import start_runsmtp
from tests.relay.inbound.test_submission import MAIL, _login, no_auth_failures  # noqa: F401 (a fixture)
from tests.ports import free_port


@pytest.fixture
def submission(transactional_db, no_auth_failures):
    server = SmtpServerThread(submission=True).start()
    yield server
    server.stop()


def _faults(client, box, rules) -> dict:
    response = client.put(f"/api/v1/mailboxes/{box['id']}/faults", {"rules": rules}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_rules_are_set_shown_with_what_is_left_and_cleared(client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    shown = _faults(client_pro, box, [{"stage": "rcpt", "code": 451, "times": 2, "match": "*@Customer.example"},
                                      {"stage": "data", "code": 554, "message": "No thanks", "probability": 0.25}])
    assert shown["rules"] == [
        {"stage": "rcpt", "code": 451, "message": "", "match": "*@customer.example", "probability": 1.0, "times": 2,
         "delay_seconds": 0.0, "remaining": 2},
        {"stage": "data", "code": 554, "message": "No thanks", "match": "", "probability": 0.25, "times": None,
         "delay_seconds": 0.0, "remaining": None}]
    assert client_pro.get(f"/api/v1/mailboxes/{box['id']}/faults").json() == shown
    assert client_pro.delete(f"/api/v1/mailboxes/{box['id']}/faults").status_code == 204
    assert client_pro.get(f"/api/v1/mailboxes/{box['id']}/faults").json() == {"rules": []}


@pytest.mark.parametrize("rule", [{"stage": "helo", "code": 451}, {"stage": "rcpt", "code": 250},
                                  {"stage": "rcpt", "code": 451, "delay_seconds": 31},
                                  {"stage": "rcpt", "code": 451, "probability": 1.5},
                                  {"stage": "rcpt", "code": 451, "times": 0},
                                  {"stage": "rcpt", "code": 451, "message": "two\r\nlines"},
                                  {"stage": "rcpt", "code": 451, "colour": "red"}])
def test_a_bad_rule_is_400_naming_rules(client_pro, rule):
    box = create_mailbox(client_pro, sandbox=True)
    response = client_pro.put(f"/api/v1/mailboxes/{box['id']}/faults", {"rules": [rule]}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_request", response.content
    assert "rules" in str(response.json())


def test_a_mailbox_that_is_no_sandbox_takes_no_rules(client_pro):
    box = create_mailbox(client_pro)
    response = client_pro.put(f"/api/v1/mailboxes/{box['id']}/faults",
                              {"rules": [{"stage": "rcpt", "code": 451}]}, format="json")
    assert response.status_code == 400


def test_a_451_at_rcpt_twice_then_accepted(submission, client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    _faults(client_pro, box, [{"stage": "rcpt", "code": 451, "times": 2, "match": "*@customer.example",
                               "message": "Try again later"}])
    with _login(submission.submission_port, None, box["address"], box["smtp"]["password"]) as smtp:
        for _ in range(2):
            with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
                smtp.sendmail("app@staging.example", ["alice@customer.example"], MAIL)
            assert refused.value.recipients["alice@customer.example"] == (451, b"4.0.0 Try again later")
            smtp.rset()
        assert smtp.sendmail("app@staging.example", ["alice@customer.example"], MAIL) == {}
    assert Message.objects.filter(mailbox_id=box["id"]).count() == 1
    assert client_pro.get(f"/api/v1/mailboxes/{box['id']}/faults").json()["rules"][0]["remaining"] == 0


def test_a_probability_rule_answers_within_its_binomial_bounds(submission, client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    _faults(client_pro, box, [{"stage": "mail", "code": 421, "probability": 0.5}])
    faulted = 0
    with _login(submission.submission_port, None, box["address"], box["smtp"]["password"]) as smtp:
        for _ in range(200):
            code, _text = smtp.mail("app@staging.example")
            assert code in (250, 421)
            faulted += code == 421
            smtp.rset()
    # 200 draws at 0.5: mean 100, standard deviation 7.07; five of them either side.
    assert 65 <= faulted <= 135, faulted


def test_a_faulted_message_is_not_stored(submission, client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    _faults(client_pro, box, [{"stage": "data", "code": 554, "match": "bad@*"}])
    with _login(submission.submission_port, None, box["address"], box["smtp"]["password"]) as smtp:
        with pytest.raises(smtplib.SMTPDataError) as refused:
            smtp.sendmail("bad@staging.example", ["alice@customer.example"], MAIL)
        assert refused.value.smtp_code == 554
        assert smtp.sendmail("good@staging.example", ["alice@customer.example"], MAIL) == {}
    assert [m.envelope_from for m in Message.objects.filter(mailbox_id=box["id"])] == ["good@staging.example"]


def test_a_fault_at_auth_is_no_failure_and_never_locks_out(submission, client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    _faults(client_pro, box, [{"stage": "auth", "code": 454, "times": FAILURES_ALLOWED + 2}])
    for _ in range(FAILURES_ALLOWED + 2):
        with pytest.raises(smtplib.SMTPAuthenticationError) as faulted:
            _login(submission.submission_port, None, box["address"], box["smtp"]["password"])
        assert faulted.value.smtp_code == 454
    _login(submission.submission_port, None, box["address"], box["smtp"]["password"]).quit()


def test_times_is_spent_once_across_two_smtp_processes(transactional_db, client_pro):
    box = create_mailbox(client_pro, sandbox=True)
    _faults(client_pro, box, [{"stage": "rcpt", "code": 452, "times": 30}])
    servers, ports = [], []
    try:
        for _ in range(2):
            port = free_port()
            _, server = start_runsmtp(env={"RELAY_SUBMISSION_PORT": str(port)})
            servers.append(server)
            ports.append(port)
        answers: list[int] = []
        lock = threading.Lock()

        def send(port: int) -> None:
            with _login(port, None, box["address"], box["smtp"]["password"]) as smtp:
                smtp.mail("app@staging.example")
                for number in range(40):
                    code, _text = smtp.rcpt(f"user{number}@customer.example")
                    with lock:
                        answers.append(code)

        senders = [threading.Thread(target=send, args=(port,)) for port in ports for _ in range(2)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(60)
    finally:
        for server in servers:
            server.terminate()
            server.wait(30)
    assert len(answers) == 160
    assert answers.count(452) == 30 and answers.count(250) == 130
