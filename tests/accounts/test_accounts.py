"""Accounts (docs/api.md): the lifecycle and its timestamps, sign-up, activation by link or
code, recovery, keys, suspension, and the pages the mailed links open."""
import re
import smtplib
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from accounts import identity, services, tokens
from accounts.errors import Gone, InvalidRequest
from accounts.models import Account, AccountStatus, ApiKey, Token
from relay.models import OutboxKind, OutboxMail
from core.clock import db_now
from tests.helpers import create_via_api, earlier, free_port, wait_until

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=dt_timezone.utc)


@pytest.fixture(autouse=True)
def clean_rate_limits():
    """Every test starts with the per-address budgets unspent (they live in the shared cache)."""
    cache.clear()
    yield
    cache.clear()


def sign_up(api, email="ann@example.com", login="ann"):
    return api.post("/api/v1/accounts", {"email": email, "login": login}, format="json")


@pytest.fixture(autouse=True)
def tasks_run_here():
    """A recovery request is queued as a task (relay.tasks.mail_key_recovery); these tests
    read its mail at once, so tasks run in this process, as a worker would run them."""
    from config.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def last_mail(email: str) -> tuple[str, str, OutboxMail]:
    """The link token and the code of the latest mail to `email`, as its reader sees them."""
    mail = OutboxMail.objects.filter(to=[email]).latest("id")
    link = re.search(r"http://127\.0\.0\.1:8000/(?:activate|recover)/([A-Za-z0-9_-]{86})", mail.text)
    code = re.search(r"\b(\d{5})\b", mail.text)
    return link.group(1), code.group(1), mail


def activate(api, **body):
    return api.post("/api/v1/accounts/activate", body, format="json")


def keyed(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture
def active(api):
    """An active account `ann` and its first key."""
    sign_up(api)
    link, _, _ = last_mail("ann@example.com")
    return activate(api, token=link).json()["api_key"]


# --- the lifecycle ---------------------------------------------------------------------
def during(action):
    """`action`'s result, and the database's clock just before and after it: a time it
    writes is the database's now, so it falls between."""
    before = db_now()
    done = action()
    return done, before, db_now()


def test_activation_sets_activated_at_and_status_changed_at(db):
    account = Account.objects.create(email="a@example.com", login="aaa")
    account, before, after = during(lambda: services.account_set_status(account=account, status=AccountStatus.ACTIVE))
    assert account.status == "active"
    assert account.activated_at == account.status_changed_at and before <= account.activated_at <= after


def test_suspending_sets_suspended_at_and_clears_unsuspended_at(db):
    account = Account.objects.create(login="bbb", status=AccountStatus.ACTIVE, activated_at=T0,
                                     unsuspended_at=T0)
    account, before, after = during(lambda: services.account_suspend(account=account))
    assert account.status == "suspended"
    assert account.suspended_at == account.status_changed_at and before <= account.suspended_at <= after
    assert account.unsuspended_at is None and account.activated_at == T0


def test_unsuspending_an_activated_account_makes_it_active_again(db):
    account = Account.objects.create(login="ccc", status=AccountStatus.SUSPENDED, activated_at=T0, suspended_at=T0)
    account, before, after = during(lambda: services.account_unsuspend(account=account))
    assert account.status == "active"
    assert account.unsuspended_at == account.status_changed_at and before <= account.unsuspended_at <= after
    assert account.suspended_at is None and account.activated_at == T0


def test_unsuspending_an_account_never_activated_returns_it_to_provisioned(db):
    account = Account.objects.create(login="ddd", email="d@example.com")
    account = services.account_suspend(account=account)
    account, before, after = during(lambda: services.account_unsuspend(account=account))
    assert account.status == "provisioned"
    assert before <= account.unsuspended_at <= after and account.suspended_at is None and account.activated_at is None


def test_setting_the_same_status_changes_nothing(db):
    account = Account.objects.create(login="eee", status=AccountStatus.ACTIVE, status_changed_at=T0)
    assert services.account_set_status(account=account, status="active").status_changed_at == T0


def test_an_active_account_cannot_go_back_to_provisioned(db):
    account = Account.objects.create(login="fff", status=AccountStatus.ACTIVE)
    with pytest.raises(InvalidRequest):
        services.account_set_status(account=account, status="provisioned")


def test_status_is_read_only_in_the_admin_and_changes_by_its_actions(admin_client):
    account = Account.objects.create(login="ggg", status=AccountStatus.ACTIVE, activated_at=T0)
    page = admin_client.get(f"/admin/accounts/account/{account.id}/change/")
    assert page.status_code == 200 and b'name="status"' not in page.content
    assert admin_client.get("/admin/accounts/account/add/").status_code == 403
    admin_client.post("/admin/accounts/account/", {"action": "suspend", "_selected_action": [account.id]})
    account.refresh_from_db()
    assert account.status == "suspended" and account.suspended_at is not None


# --- sign-up -----------------------------------------------------------------------------
def test_sign_up_is_202_and_queues_a_real_activation_mail(api):
    response = sign_up(api, email="Ann@Example.com")
    assert response.status_code == 202 and response.json() == {"status": "provisioned"}
    account = Account.objects.get(login="ann")
    assert account.status == "provisioned" and account.created_at is not None
    link, code, mail = last_mail("Ann@Example.com")
    assert mail.kind == OutboxKind.ACTIVATION and mail.subject == "Activate your Relay account"
    assert code in mail.text and "15 minutes" in mail.text
    assert f"http://127.0.0.1:8000/activate/{link}" in mail.html and code in mail.html
    token = Token.objects.get(account=account)
    # Stored only as hashes: neither the secret, the link nor the code is in the row.
    secret, _ = tokens.decode(link)
    assert token.secret_hash == tokens.secret_hash(secret)
    assert code not in (token.secret_hash, token.code_hash) and link not in token.code_hash


def test_a_taken_login_answers_as_any_sign_up_whether_the_email_has_an_account_or_not(api, active):
    """With the login `ann` taken, an unknown email and the email of an account get the
    same answer (it was 409 and 202: an email's account could be found out)."""
    unknown = sign_up(api, email="other@example.com", login="ann")
    known = sign_up(api, email="ann@example.com", login="ann")
    fresh = sign_up(api, email="new@example.com", login="newbie")
    assert (unknown.status_code, unknown.json()) == (known.status_code, known.json()) == (202, fresh.json())
    assert not Account.objects.filter(email="other@example.com").exists()
    # The unknown email's owner is told by mail; the answer told nobody.
    [told] = OutboxMail.objects.filter(to=["other@example.com"])
    assert "login" in told.subject and '"ann"' in told.text and told.token_id is None


def test_a_taken_email_gets_the_same_202_and_no_second_account(api, active):
    first = sign_up(api, email="new@example.com", login="newbie")
    again = sign_up(api, email="ANN@example.com", login="someoneelse")
    assert (again.status_code, again.json()) == (first.status_code, first.json())
    assert Account.objects.filter(email__iexact="ann@example.com").count() == 1
    assert not Account.objects.filter(login="someoneelse").exists()


@pytest.mark.parametrize("body", [{"email": "x@example.com", "login": "A"}, {"email": "nope", "login": "abc"},
                                  {"email": "x@example.com"}, {"email": "x@example.com", "login": "abc", "plan": "pro"}])
def test_bad_sign_ups_are_400_naming_the_field(api, body):
    response = api.post("/api/v1/accounts", body, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    assert response.json()["fields"]


# --- activation --------------------------------------------------------------------------
def test_activating_by_link_gives_the_first_key_once(api):
    sign_up(api)
    link, _, _ = last_mail("ann@example.com")
    response = activate(api, token=link)
    assert response.status_code == 200
    body = response.json()
    assert body["account"]["login"] == "ann" and body["account"]["status"] == "active"
    assert body["api_key"].startswith("rk_")
    assert keyed(body["api_key"]).get("/api/v1/account").json()["login"] == "ann"
    again = activate(api, token=link)
    assert again.status_code == 410 and again.json()["code"] == "expired"


def test_activating_by_email_and_code(api):
    sign_up(api)
    _, code, _ = last_mail("ann@example.com")
    response = activate(api, email="ANN@example.com", code=code)
    assert response.status_code == 200 and response.json()["account"]["status"] == "active"


def test_five_wrong_codes_burn_the_token(api):
    sign_up(api)
    _, code, _ = last_mail("ann@example.com")
    wrong = f"{(int(code) + 1) % 100000:05d}"
    answers = [activate(api, email="ann@example.com", code=wrong).status_code for _ in range(5)]
    assert answers == [400] * 5
    assert Token.objects.get().wrong_codes == 5
    assert activate(api, email="ann@example.com", code=code).status_code == 400
    assert Account.objects.get(login="ann").status == "provisioned"


def test_a_tampered_link_is_refused_before_any_query(api):
    sign_up(api)
    link, _, _ = last_mail("ann@example.com")
    tampered = link[:10] + ("A" if link[10] != "A" else "B") + link[11:]
    with CaptureQueriesContext(connection) as queries, pytest.raises(tokens.BadSignature):
        services.account_activate_by_link(link_token=tampered)
    assert len(queries) == 0
    response = activate(api, token=tampered)
    assert response.status_code == 400 and "link" in response.json()["message"]


def test_an_expired_token_is_410(api):
    sign_up(api)
    link, _, _ = last_mail("ann@example.com")
    earlier(Token.objects.all(), timedelta(seconds=901), "expires_at")  # 901 s on, by the database's clock
    assert activate(api, token=link).status_code == 410
    assert Account.objects.get(login="ann").status == "provisioned"


def test_a_token_signed_with_an_older_key_still_verifies(api, settings):
    old, new = bytes.fromhex("11" * 32), bytes.fromhex("22" * 32)
    settings.RELAY_TOKEN_SIGNING_KEYS = [old]
    sign_up(api)
    link, _, _ = last_mail("ann@example.com")
    settings.RELAY_TOKEN_SIGNING_KEYS = [new]
    assert activate(api, token=link).status_code == 400  # the old key is gone: refused
    settings.RELAY_TOKEN_SIGNING_KEYS = [new, old]  # rotated in second place: accepted
    assert activate(api, token=link).status_code == 200
    settings.RELAY_TOKEN_SIGNING_KEYS = [new, old]
    fresh = tokens.sign("activation", b"x" * 32)
    settings.RELAY_TOKEN_SIGNING_KEYS = [new]  # the first key signs: the new one alone verifies it
    assert tokens.verify("activation", fresh) == b"x" * 32


def test_an_activation_link_is_not_a_recovery_link(db):
    secret = tokens.new_secret()
    link = tokens.sign("activation", secret)
    with pytest.raises(tokens.BadSignature):
        tokens.verify("key_recovery", link, "12345")


@pytest.mark.django_db(transaction=True)
def test_two_confirms_racing_on_one_token_yield_one_key():
    api = APIClient()
    sign_up(api)
    link, _, _ = last_mail("ann@example.com")
    start = threading.Barrier(4)
    results: list = []

    def confirm() -> None:
        start.wait()
        try:
            results.append(services.account_activate_by_link(link_token=link)[1])
        except Gone:
            results.append("gone")
        finally:
            connection.close()

    threads = [threading.Thread(target=confirm) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(r == "gone" for r in results) == [False, True, True, True]
    assert ApiKey.objects.filter(account__login="ann").count() == 1


# --- recovery ------------------------------------------------------------------------------
def test_recovery_gives_a_new_key_and_revokes_the_others(api, active):
    second = keyed(active).post("/api/v1/keys", {}, format="json").json()["api_key"]
    assert api.post("/api/v1/accounts/recover", {"email": "ann@example.com"}, format="json").status_code == 202
    link, code, mail = last_mail("ann@example.com")
    assert mail.kind == OutboxKind.RECOVERY and mail.subject == "Recover your Relay API key"
    assert f"/recover/{link}" in mail.text
    response = api.post("/api/v1/accounts/recover/confirm", {"token": link, "code": code}, format="json")
    assert response.status_code == 200
    new = response.json()["api_key"]
    assert keyed(new).get("/api/v1/account").status_code == 200
    assert keyed(active).get("/api/v1/account").status_code == 401
    assert keyed(second).get("/api/v1/account").status_code == 401
    assert api.post("/api/v1/accounts/recover/confirm", {"token": link, "code": code},
                    format="json").status_code == 410


def test_recovery_answers_the_same_for_an_unknown_email_and_mails_nothing(api, active):
    before = OutboxMail.objects.count()
    known = api.post("/api/v1/accounts/recover", {"email": "ann@example.com"}, format="json")
    unknown = api.post("/api/v1/accounts/recover", {"email": "nobody@example.com"}, format="json")
    assert (known.status_code, known.json()) == (unknown.status_code, unknown.json()) == (202, {"status": "accepted"})
    assert OutboxMail.objects.count() == before + 1


def test_wrong_recovery_codes_are_400_and_the_fifth_burns_it(api, active):
    api.post("/api/v1/accounts/recover", {"email": "ann@example.com"}, format="json")
    link, code, _ = last_mail("ann@example.com")
    wrong = f"{(int(code) + 1) % 100000:05d}"
    confirm = lambda c: api.post("/api/v1/accounts/recover/confirm", {"token": link, "code": c}, format="json")  # noqa: E731
    assert [confirm(wrong).status_code for _ in range(5)] == [400] * 5
    assert confirm(code).status_code == 410
    assert keyed(active).get("/api/v1/account").status_code == 200


# --- keys -----------------------------------------------------------------------------------
def test_keys_are_listed_created_and_revoked(api, active):
    owner = keyed(active)
    created = owner.post("/api/v1/keys", {}, format="json")
    assert created.status_code == 201 and created.json()["api_key"].startswith("rk_")
    listed = owner.get("/api/v1/keys").json()
    assert listed["count"] == 2 and "api_key" not in listed["results"][0]
    assert set(listed["results"][0]) == {"id", "prefix", "created_at", "last_used_at", "revoked_at"}
    assert owner.delete(f"/api/v1/keys/{created.json()['id']}").status_code == 204
    assert keyed(created.json()["api_key"]).get("/api/v1/account").status_code == 401
    keys = {item["prefix"]: item for item in owner.get("/api/v1/keys").json()["results"]}
    assert keys[active[:10]]["last_used_at"] is not None and keys[active[:10]]["revoked_at"] is None
    assert keys[created.json()["prefix"]]["revoked_at"] is not None


def test_another_accounts_key_is_404_and_a_mailbox_token_is_403(api, active, make_client):
    other = make_client("bob", "pro")
    bobs_key = other.get("/api/v1/keys").json()["results"][0]["id"]
    assert keyed(active).delete(f"/api/v1/keys/{bobs_key}").status_code == 404
    token = create_via_api(APIClient()).json()["token"]
    assert keyed(token).get("/api/v1/keys").status_code == 403


def test_createapikey_with_email_makes_an_active_account(db, capsys):
    call_command("createapikey", "carol", "--plan", "pro", "--email", "carol@example.com")
    key = capsys.readouterr().out.strip().splitlines()[-1]
    account = Account.objects.get(login="carol")
    assert (account.status, account.plan, account.email) == ("active", "pro", "carol@example.com")
    assert account.activated_at is not None
    assert keyed(key).get("/api/v1/account").json()["email"] == "carol@example.com"


# --- the key cache and revocation (accounts.identity; two processes: test_revocation.py) -------
def refused_within(client, path: str, status: int, lifetime: float) -> float:
    """Seconds until `path` answers `status`, polled; fails past the lifetime plus slack."""
    started = time.monotonic()
    wait_until(lambda: client.get(path).status_code == status, timeout=lifetime + 1, interval=0.05)
    return time.monotonic() - started


def test_a_key_is_looked_up_once_per_cache_lifetime(api, active, settings):
    settings.RELAY_KEY_CACHE_SECONDS = 60
    owner = keyed(active)
    owner.get("/api/v1/whoami")
    with CaptureQueriesContext(connection) as queries:
        assert owner.get("/api/v1/whoami").status_code == 200
    assert not [q for q in queries.captured_queries if "accounts_apikey" in q["sql"]]


def test_an_announced_revocation_empties_the_cache_before_the_next_request(api, active, settings):
    settings.RELAY_KEY_CACHE_SECONDS = 60
    owner = keyed(active)
    assert owner.get("/api/v1/whoami").status_code == 200  # cached from here
    ApiKey.objects.update(revoked_at=datetime.now(dt_timezone.utc))  # another process's revocation...
    assert owner.get("/api/v1/whoami").status_code == 200, "the cache is not in use"
    identity._revocation_announce_now()  # ...and its announcement, as it commits
    assert owner.get("/api/v1/whoami").status_code == 401


def test_an_entry_stored_by_a_thread_that_read_the_counter_before_a_revocation_is_not_trusted(
        api, active, settings):
    """Two threads of one web process: A reads the counter, then the key's row (still
    valid); the revocation commits and is announced; B serves a request; only then does A
    store its entry. That entry must not be served after the revocation."""
    settings.RELAY_KEY_CACHE_SECONDS = 60
    digest = identity.secret_digest(active)
    assert identity.api_key_for_hash(digest) is not None
    stale_entry = identity._key_cache.entries[digest]  # what thread A is about to store
    ApiKey.objects.update(revoked_at=datetime.now(dt_timezone.utc))
    identity._revocation_announce_now()
    assert identity.api_key_for_hash(identity.secret_digest("rk_some-other-key")) is None  # thread B's request
    identity._key_cache.entries[digest] = stale_entry  # thread A stores late
    assert identity.api_key_for_hash(digest) is None


def test_without_redis_no_key_is_cached(api, active, settings):
    settings.RELAY_KEY_CACHE_SECONDS = 60
    settings.RELAY_EVENTS_REDIS_URL = ""
    owner = keyed(active)
    assert owner.get("/api/v1/whoami").status_code == 200
    ApiKey.objects.update(revoked_at=datetime.now(dt_timezone.utc))
    assert owner.get("/api/v1/whoami").status_code == 401


def test_a_revocation_written_behind_the_services_back_ages_out_within_the_cache_lifetime(api, active, settings):
    settings.RELAY_KEY_CACHE_SECONDS = 2
    owner = keyed(active)
    assert owner.get("/api/v1/whoami").status_code == 200  # cached from here
    ApiKey.objects.update(revoked_at=datetime.now(dt_timezone.utc))  # as another process's revocation
    assert owner.get("/api/v1/whoami").status_code == 200, "the cache is not in use"
    assert refused_within(owner, "/api/v1/whoami", 401, 2) <= 2 + 0.5


def test_a_suspension_written_behind_the_services_back_ages_out_within_the_cache_lifetime(api, active, settings):
    settings.RELAY_KEY_CACHE_SECONDS = 2
    owner = keyed(active)
    assert owner.get("/api/v1/whoami").status_code == 200
    Account.objects.update(status=AccountStatus.SUSPENDED)
    assert refused_within(owner, "/api/v1/whoami", 403, 2) <= 2 + 0.5
    assert owner.get("/api/v1/whoami").json()["code"] == "account_suspended"


def test_a_key_revoked_in_this_process_is_refused_at_once(api, active, settings):
    settings.RELAY_KEY_CACHE_SECONDS = 60
    owner = keyed(active)
    second = owner.post("/api/v1/keys", {}, format="json").json()
    assert keyed(second["api_key"]).get("/api/v1/whoami").status_code == 200
    assert owner.delete(f"/api/v1/keys/{second['id']}").status_code == 204
    assert keyed(second["api_key"]).get("/api/v1/whoami").status_code == 401
    call_command("account", "suspend", "ann")
    assert owner.get("/api/v1/whoami").status_code == 403


def test_with_the_cache_off_a_revocation_anywhere_is_immediate(api, active, settings):
    settings.RELAY_KEY_CACHE_SECONDS = 0
    owner = keyed(active)
    assert owner.get("/api/v1/whoami").status_code == 200
    ApiKey.objects.update(revoked_at=datetime.now(dt_timezone.utc))
    assert owner.get("/api/v1/whoami").status_code == 401


def test_requests_sharing_a_cached_key_get_their_own_account(db, active, settings):
    """Threads of one web process hold copies: a change one request makes to its account
    object never shows in another's, nor in the cache."""
    settings.RELAY_KEY_CACHE_SECONDS = 60
    digest = identity.secret_digest(active)
    first = identity.api_key_for_hash(digest)
    first.account.plan = "changed"
    results = []
    threads = [threading.Thread(target=lambda: results.append(identity.api_key_for_hash(digest))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(key.account) for key in results}) == 8
    assert {key.account.plan for key in results} == {Account.objects.get(login="ann").plan}


# --- suspension --------------------------------------------------------------------------------
def test_a_suspended_accounts_keys_are_403_account_suspended_until_unsuspended(api, active):
    call_command("account", "suspend", "ann")
    response = keyed(active).get("/api/v1/mailboxes")
    assert response.status_code == 403 and response.json()["code"] == "account_suspended"
    call_command("account", "unsuspend", "ann")
    assert keyed(active).get("/api/v1/mailboxes").status_code == 200


def test_a_suspended_accounts_mailboxes_refuse_mail_and_still_expire(smtp_server, active):
    owner = keyed(active)
    box = create_via_api(owner, local_part="held").json()
    call_command("account", "suspend", "ann")
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            smtp.sendmail("x@example.com", [box["address"]], b"Subject: hi\r\n\r\nhello\r\n")
    assert refused.value.recipients[box["address"]][0] == 550
    call_command("account", "unsuspend", "ann")
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=10) as smtp:
        assert smtp.sendmail("x@example.com", [box["address"]], b"Subject: hi\r\n\r\nhello\r\n") == {}


# --- the pages the links open ---------------------------------------------------------------------
def test_the_activation_page_shows_the_login_and_consumes_nothing(client, api):
    sign_up(api)
    link, _, _ = last_mail("ann@example.com")
    for _ in range(3):  # a mail scanner, a preview, the person
        page = client.get(f"/activate/{link}")
        assert page.status_code == 200 and b"ann" in page.content and b"Activate" in page.content
    assert Token.objects.get().consumed_at is None
    assert Account.objects.get(login="ann").status == "provisioned"
    assert client.get(f"/activate/{link[:-2]}xx").status_code == 400


def test_the_recovery_page_asks_for_the_code(client, api, active):
    api.post("/api/v1/accounts/recover", {"email": "ann@example.com"}, format="json")
    link, _, _ = last_mail("ann@example.com")
    page = client.get(f"/recover/{link}")
    assert page.status_code == 200 and b'name="code"' in page.content
    assert Token.objects.filter(action="key_recovery", consumed_at=None).count() == 1
    assert client.post(f"/recover/{link}").status_code == 405


# --- limits ------------------------------------------------------------------------------------------
def test_sign_up_is_rate_limited_per_client_address(api, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "signup": "3/hour"}}
    codes = [sign_up(api, email=f"u{i}@example.com", login=f"user{i}").status_code for i in range(4)]
    assert codes == [202, 202, 202, 429]
    other = api.post("/api/v1/accounts", {"email": "z@example.com", "login": "zzz"}, format="json",
                     REMOTE_ADDR="203.0.113.9")
    assert other.status_code == 202


@pytest.mark.workers
def test_the_sign_up_limit_holds_across_web_processes(processes):
    port = free_port()
    processes.web("web", port, workers=3, env={"RELAY_SIGNUP_RATE": "4/hour"})
    processes.wait_ready()
    codes = []
    for i in range(12):  # new connections, spread over the three workers
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v1/accounts/recover", method="POST",
            data=f'{{"email": "r{i}@example.com"}}'.encode(), headers={"Content-Type": "application/json"})
        try:
            codes.append(urllib.request.urlopen(request, timeout=10).status)
        except urllib.error.HTTPError as error:
            codes.append(error.code)
    assert codes.count(202) == 4 and codes.count(429) == 8


def test_the_addresses_of_one_ipv6_block_share_one_sign_up_budget(api, settings):
    """The attack: a client with a /64 of its own sends each guess from a new address."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "signup": "2/hour"}}
    codes = [api.post("/api/v1/accounts", {"email": f"v{i}@example.com", "login": f"vsix{i}"}, format="json",
                      REMOTE_ADDR=f"2001:db8:5:6::{i + 1:x}").status_code for i in range(3)]
    assert codes == [202, 202, 429]
    other_block = api.post("/api/v1/accounts", {"email": "w@example.com", "login": "wsix"}, format="json",
                           REMOTE_ADDR="2001:db8:5:7::1")
    assert other_block.status_code == 202


# --- guessing activation codes --------------------------------------------------------------------
def test_an_unknown_email_and_a_wrong_code_get_one_and_the_same_answer(api):
    sign_up(api)
    _, code, _ = last_mail("ann@example.com")
    wrong = f"{(int(code) + 1) % 100000:05d}"
    unknown = activate(api, email="nobody@example.com", code=code)
    known = activate(api, email="ann@example.com", code=wrong)
    assert (unknown.status_code, unknown.json()) == (known.status_code, known.json())
    assert known.status_code == 400


def test_signing_up_again_does_not_buy_new_guesses(api):
    sign_up(api)
    _, first_code, _ = last_mail("ann@example.com")
    wrong = f"{(int(first_code) + 1) % 100000:05d}"
    assert [activate(api, email="ann@example.com", code=wrong).status_code for _ in range(3)] == [400] * 3
    sign_up(api)  # the same email again: a fresh mail, not five fresh tries
    _, code, _ = last_mail("ann@example.com")
    wrong = f"{(int(code) + 1) % 100000:05d}"
    assert [activate(api, email="ann@example.com", code=wrong).status_code for _ in range(2)] == [400] * 2
    assert activate(api, email="ann@example.com", code=code).status_code == 400
    assert Account.objects.get(login="ann").status == "provisioned"


def test_parallel_wrong_codes_get_no_more_checks_than_the_limit(transactional_db, monkeypatch):
    """The attack: twenty guesses at once, each hoping to be checked before any is counted."""
    issued = services.account_sign_up(email="ann@example.com", login="ann")
    checked = []
    real_hash = tokens.code_hash
    monkeypatch.setattr(tokens, "code_hash", lambda digest, code: checked.append(code) or real_hash(digest, code))
    barrier = threading.Barrier(20)
    answers = []

    def guess(number: int) -> None:
        barrier.wait(10)
        try:
            wrong = (int(issued.code) + 1 + number) % 100000
            services.account_activate_by_code(email="ann@example.com", code=f"{wrong:05d}")
        except InvalidRequest:
            answers.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=guess, args=(number,)) for number in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == ["refused"] * 20
    assert len(checked) <= tokens.MAX_WRONG_CODES
    assert Token.objects.get().wrong_codes == tokens.MAX_WRONG_CODES


def test_a_recovery_request_does_the_same_work_for_a_known_and_an_unknown_email(api, active, monkeypatch):
    """The attack: timing the answer to learn which emails have accounts. The request
    only queues the work, the same way for both."""
    queued = []
    monkeypatch.setattr("api.account_views.mail_key_recovery.delay", queued.append)
    with CaptureQueriesContext(connection) as known_queries:
        known = api.post("/api/v1/accounts/recover", {"email": "ann@example.com"}, format="json")
    with CaptureQueriesContext(connection) as unknown_queries:
        unknown = api.post("/api/v1/accounts/recover", {"email": "nobody@example.com"}, format="json")
    assert known.status_code == unknown.status_code == 202
    assert len(known_queries) == len(unknown_queries) == 0
    assert queued == ["ann@example.com", "nobody@example.com"]


def test_wrong_codes_from_a_guesser_do_not_take_the_link_from_the_one_who_holds_the_mail(api):
    sign_up(api)
    link, code, _ = last_mail("ann@example.com")
    wrong = f"{(int(code) + 1) % 100000:05d}"
    assert [activate(api, email="ann@example.com", code=wrong).status_code for _ in range(6)] == [400] * 6
    assert activate(api, token=link).status_code == 200


def test_an_account_cannot_hold_more_live_keys_than_the_cap(client_pro, settings):
    settings.RELAY_MAX_API_KEYS = 3
    made = [client_pro.post("/api/v1/keys", {}, format="json") for _ in range(2)]  # the fixture's key is the first
    assert [response.status_code for response in made] == [201, 201]
    refused = client_pro.post("/api/v1/keys", {}, format="json")
    assert refused.status_code == 429 and refused.json()["code"] == "quota_exceeded"
    assert int(refused["Retry-After"]) >= 1
    # A deleted key no longer counts.
    assert client_pro.delete(f"/api/v1/keys/{made[0].json()['id']}").status_code == 204
    assert client_pro.post("/api/v1/keys", {}, format="json").status_code == 201
