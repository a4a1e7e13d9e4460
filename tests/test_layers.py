"""Imports point down (docs/architecture.md): api/ above expiry/ above relay/ above mailboxes/;
only api/ knows DRF; and no modules of an app import one another in a circle.
import-linter checks the contracts in .importlinter."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

APPS = ("inbox", "api", "checks", "expiry", "webhooks", "relay", "mailboxes", "domains", "accounts", "owed", "core", "config")


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--config", str(tree / ".importlinter")],
                          cwd=tree, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(tree)})


def test_no_app_imports_an_app_above_it():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def copy_of_the_tree(tmp_path: Path) -> Path:
    for app in APPS:
        shutil.copytree(ROOT / app, tmp_path / app, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path)
    return tmp_path


@pytest.mark.parametrize("app, upward", [("mailboxes", "api.views"), ("expiry", "config.celery"),
                                         ("inbox", "api.errors"), ("api", "inbox.views")])
def test_an_upward_import_breaks_the_contract(tmp_path, app, upward):
    # The same check on a copy of the tree with one upward import added must fail, or
    # the test above would pass whatever the code did; config/ counts as above all, and
    # the two web doors (inbox/, api/) stand side by side: neither imports the other.
    copy_of_the_tree(tmp_path)
    (tmp_path / app / "upward.py").write_text(f"import {upward}  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert f"{app}.upward -> {upward}" in result.stdout


def test_an_import_circle_inside_an_app_breaks_the_contract(tmp_path):
    copy_of_the_tree(tmp_path)
    (tmp_path / "relay" / "circle_a.py").write_text("from relay import circle_b  # noqa\n")
    (tmp_path / "relay" / "circle_b.py").write_text("from relay import circle_a  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "No cycles are allowed in relay" in result.stdout


# --- each rule, one definition ----------------------------------------------------------------
# (what restates the rule, the one place allowed to say it, what the rule is, where it is
# looked for: every app, or the doors alone)
DOORS = ("api", "inbox")
# A door opening a mailbox itself: each is a step of relay.reading.mailbox_open (ownership,
# lazy expiry, the live check, the cursor's check, the mail server's newest deliveries).
READING = "opening a mailbox: relay.reading.mailbox_open"
RULES = [
    *((step, "", READING, DOORS) for step in ("read_now(", "mailbox_lazy_expire(", "mailboxes_lazy_expire(",
                                              "message_cursor_check(", "mailboxes_visible_to(")),
    *((step, "", "searching messages: relay.reading.messages_read", DOORS)
      for step in ("words_search_plan(", "message_search(", "contents_index_all_words(")),
    ('settings.RELAY_BACKEND ==', "config/settings.py", 'which backend calls a server: relay.backends.keeps_accounts()',
     APPS),
    ('settings.RELAY_BACKEND in', "config/settings.py", 'which backend calls a server: relay.backends.keeps_accounts()',
     APPS),
    ('getattr(backend, "jmap"', "", 'which backend holds the mail: relay.backends.mail_store()', APPS),
    ("status=MailboxStatus.ACTIVE, expires_at__", "mailboxes/models.py",
     "due and receiving: Mailbox.objects.due(now) and .receiving(now)", APPS),
    ('partition(" ")', "api/authentication.py", "reading a bearer credential: api.authentication.bearer_secret", APPS),
    ("MailboxStatus.PROVISIONING, MailboxStatus.ACTIVE", "mailboxes/models.py", "live: mailboxes.models.LIVE", APPS),
    ("MailboxStatus.ACTIVE, MailboxStatus.PROVISIONING", "mailboxes/models.py", "live: mailboxes.models.LIVE", APPS),
    ("CleanupState.PENDING, CleanupState.RUNNING", "", "a cleanup still owed: CLEANUPS.still_owed()", APPS),
    ("is_valid(raise_exception", "api/fields.py", "reading a route's or a tool's input: api.fields.validated", APPS),
    ("[a-z0-9_-]+(", "mailboxes/lifecycle.py", "a local part: mailboxes.lifecycle.LOCAL_PART_PATTERN", APPS),
    ("[A-Za-z0-9_-]+(", "", "a local part: mailboxes.lifecycle.LOCAL_PART_PATTERN", APPS),
    ("settings.RELAY_QUOTAS[", "accounts/models.py", "what a plan allows: accounts.models.plan_limit", APPS),
    ("settings.RELAY_MAX_DOMAINS[", "accounts/models.py", "what a plan allows: accounts.models.plan_limit", APPS),
    ("TTL_CAP_MS[", "accounts/models.py", "what a plan allows: accounts.models.plan_limit", APPS),
    ("[:1000]", "", "how much of an error is kept: owed.ERROR_MAX_CHARS", APPS),
    ("[:2000]", "", "how much of an error is kept: owed.ERROR_MAX_CHARS", APPS),
    ("MAX = 50", "", "how many a page, a wait or a list tool returns: api.pagination.PAGE_SIZE", APPS),
    ("RESULTS = 50", "", "how many a page, a wait or a list tool returns: api.pagination.PAGE_SIZE", APPS),
    ("page_size = 50", "", "how many a page, a wait or a list tool returns: api.pagination.PAGE_SIZE", APPS),
    ("[a-z0-9_-]{1,32}", "mailboxes/lifecycle.py", "a mailbox's labels: mailboxes.lifecycle.labels_checked", APPS),
    ('"multipart/", "message/"', "relay/outbox/outbound.py", "what a send takes: relay.outbox.outbound.sending_checked",
     APPS),
    ("b64decode(value", "relay/outbox/outbound.py", "what a send takes: relay.outbox.outbound.sending_checked", APPS),
    ("Redis.from_url(", "core/redis_clients.py", "a Redis client: core.redis_clients", APPS),
    ("redis.from_url(", "core/redis_clients.py", "a Redis client: core.redis_clients", APPS),
    ("revocation_count(", "accounts/identity.py", "caching a credential while no revocation is announced: accounts.identity.Cache",
     APPS),
    # Who is calling: one parser of every credential, one digest of a secret, one rule for
    # whether an account may act (accounts.identity; docs/architecture.md, "Who is calling").
    *((pattern, "accounts/identity.py", "which credential a secret is: accounts.identity.authenticate", APPS)
      for pattern in ('"rk_"', '"rt_"', "startswith(API_KEY_PREFIX", "startswith(MAILBOX_TOKEN_PREFIX",
                      "startswith((MAILBOX_TOKEN_PREFIX", "startswith((API_KEY_PREFIX")),
    (".hexdigest()", "accounts/identity.py", "a secret's digest: accounts.identity.secret_digest", APPS),
    *((pattern, "accounts/identity.py", "whether an account may act: accounts.identity.may_act", APPS)
      for pattern in ("status != AccountStatus.ACTIVE", "__status=AccountStatus.ACTIVE", "owner_status ==",
                      "account_active(")),
]


def rules_restated(tree: Path) -> list[str]:
    """`path:line: rule` for each line (not a definition) that says a rule outside its home."""
    found = []
    for app in APPS:
        for path in sorted((tree / app).rglob("*.py")):
            relative = str(path.relative_to(tree))
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                for pattern, home, rule, where in RULES:
                    if app in where and pattern in code and relative != home and "def " not in code:
                        found.append(f"{relative}:{number}: {rule}")
    return found


def test_each_rule_has_one_definition():
    assert rules_restated(ROOT) == []


@pytest.mark.parametrize("app, code, rule", [
    ("expiry", "from django.conf import settings\n\n\ndef batch():\n"
               "    return 200 if settings.RELAY_BACKEND == 'local' else 1\n",
     "which backend calls a server: relay.backends.keeps_accounts()"),
    ("api", "from relay import mailserver\n\n\ndef look(mailboxes):\n    mailserver.read_now(mailboxes)\n", READING),
    ("inbox", "from accounts import identity\n\n\ndef key_of(secret):\n    return secret.startswith(\"rk_\")\n",
     "which credential a secret is: accounts.identity.authenticate"),
    ("mailboxes", "import hashlib\n\n\ndef digest(token):\n    return hashlib.sha256(token.encode()).hexdigest()\n",
     "a secret's digest: accounts.identity.secret_digest"),
    ("api", "from accounts.models import AccountStatus\n\n\ndef ok(account):\n    return account.status != AccountStatus.ACTIVE\n",
     "whether an account may act: accounts.identity.may_act"),
])
def test_a_restated_rule_is_found(tmp_path, app, code, rule):
    copy_of_the_tree(tmp_path)
    (tmp_path / app / "restated.py").write_text(code)
    assert rules_restated(tmp_path) == [f"{app}/restated.py:5: {rule}"]


def test_every_task_name_is_a_task_of_the_celery_app_and_spelt_out_once():
    from config.celery import app
    from core import task_names

    app.loader.import_default_modules()
    assert set(task_names.ALL) <= set(app.tasks), set(task_names.ALL) - set(app.tasks)
    spelt = [f"{path.relative_to(ROOT)}:{number}"
             for app_name in APPS for path in sorted((ROOT / app_name).rglob("*.py")) if path.name != "task_names.py"
             for number, line in enumerate(path.read_text().splitlines(), 1)
             for name in task_names.ALL if f'"{name}"' in line or f"'{name}'" in line]
    assert spelt == []
