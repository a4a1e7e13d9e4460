"""A bad setting stops start-up with a message naming the variable."""
import os
import secrets
import subprocess
import sys

import pytest

from tests.helpers import ROOT

CASES = [
    ({"RELAY_MIN_TTL_MS": "five"}, "RELAY_MIN_TTL_MS"),
    ({"RELAY_MIN_TTL_MS": "900000", "RELAY_MAX_TTL_MS": "600000"}, "RELAY_MIN_TTL_MS"),
    ({"RELAY_SWEEP_INTERVAL_SECONDS": "0"}, "RELAY_SWEEP_INTERVAL_SECONDS"),
    ({"RELAY_SWEEP_BATCH_SIZE": "-1"}, "RELAY_SWEEP_BATCH_SIZE"),
    ({"RELAY_BACKEND": "postfix"}, "RELAY_BACKEND"),
    ({"RELAY_BACKEND": "stalwart", "STALWART_URL": "", "STALWART_TOKEN": ""}, "STALWART_URL"),
    ({"RELAY_SMTP_PORT": "70000"}, "RELAY_SMTP_PORT"),
    ({"RELAY_ANON_CREATE_RATE": "lots"}, "RELAY_ANON_CREATE_RATE"),
    ({"DJANGO_DEBUG": "maybe"}, "DJANGO_DEBUG"),
    ({"DATABASE_URL": "nosuchdb://x"}, "DATABASE_URL"),
    ({"CELERY_BROKER_URL": "kafka://x"}, "CELERY_BROKER_URL"),
    ({"RELAY_DOMAINS": " , "}, "RELAY_DOMAINS"),
    ({"RELAY_CLEANUP_LEASE_SECONDS": "1"}, "RELAY_CLEANUP_LEASE_SECONDS"),
    ({"RELAY_TRUSTED_PROXIES": "all"}, "RELAY_TRUSTED_PROXIES"),
    ({"RELAY_QUOTA_FREE_SENDS_PER_DAY": "lots"}, "RELAY_QUOTA_FREE_SENDS_PER_DAY"),
    ({"RELAY_HTTPS": "sometimes"}, "RELAY_HTTPS"),
    ({"RELAY_SMTP_TLS_CERT": "/etc/hostname"}, "RELAY_SMTP_TLS_CERT"),
    ({"RELAY_SMTP_TLS_CERT": "/no/such/cert.pem", "RELAY_SMTP_TLS_KEY": "/no/such/key.pem"}, "RELAY_SMTP_TLS_CERT"),
    ({"RELAY_MAX_OPEN_WAITS": "0"}, "RELAY_MAX_OPEN_WAITS"),
    ({"RELAY_MAX_WEBHOOKS": "many"}, "RELAY_MAX_WEBHOOKS"),
    ({"RELAY_DNS_RESOLVERS": "dns.google"}, "RELAY_DNS_RESOLVERS"),
    ({"RELAY_DNS_RESOLVERS": "127.0.0.1:99999"}, "RELAY_DNS_RESOLVERS"),
    ({"RELAY_DNS_TIMEOUT_SECONDS": "0"}, "RELAY_DNS_TIMEOUT_SECONDS"),
    ({"RELAY_DKIM_SELECTOR": "two.labels"}, "RELAY_DKIM_SELECTOR"),
    ({"RELAY_DKIM_PRIVATE_KEY_FILE": "/no/such/key.pem"}, "RELAY_DKIM_PRIVATE_KEY_FILE"),
    ({"RELAY_MAX_DOMAINS": "gold=3"}, "RELAY_MAX_DOMAINS"),
    ({"RELAY_MCP_ALLOWED_ORIGINS": "agent.example"}, "RELAY_MCP_ALLOWED_ORIGINS"),
    ({"RELAY_WEBHOOK_CA_FILE": "/no/such/ca.pem"}, "RELAY_WEBHOOK_CA_FILE"),
    ({"RELAY_SPAMD_URL": "http://127.0.0.1:783"}, "RELAY_SPAMD_URL"),
    ({"RELAY_SPAMD_URL": "spamd://127.0.0.1:notaport"}, "RELAY_SPAMD_URL"),
    ({"RELAY_LINK_CHECK_CONCURRENCY": "0"}, "RELAY_LINK_CHECK_CONCURRENCY"),
    ({"RELAY_MCP_ALLOWED_ORIGINS": "https://agent.example/app"}, "RELAY_MCP_ALLOWED_ORIGINS"),
    # A mail server as the backend: the id of its Authentication-Results must be named.
    ({"RELAY_BACKEND": "stalwart", "STALWART_URL": "http://127.0.0.1:9", "STALWART_TOKEN": "t"}, "RELAY_AUTHSERV_ID"),
    # With DEBUG off, no default, short or missing secret key.
    ({"DJANGO_DEBUG": "false", "DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY"),
    ({"DJANGO_DEBUG": "false", "DJANGO_SECRET_KEY": "short-key"}, "DJANGO_SECRET_KEY"),
    ({"DJANGO_DEBUG": "false", "DJANGO_SECRET_KEY": "relay-dev-only-secret-key-never-use-it-in-production-0123456789"},
     "DJANGO_SECRET_KEY"),
]


def start_django(env_changes: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_changes}
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("env_changes, variable", CASES)
def test_bad_value_stops_startup_naming_the_variable(env_changes, variable):
    result = start_django(env_changes)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert variable in result.stderr.strip().splitlines()[-1]


def test_good_values_start():
    assert start_django({"RELAY_DOMAINS": "a.test,b.test", "RELAY_MIN_TTL_MS": "1000"}).returncode == 0


def test_debug_is_off_unless_asked_for(settings):
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_DEBUG"}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup(); from django.conf import settings; "
                             "print(settings.DEBUG)"], cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr


def test_production_settings_pass_check_deploy_cleanly():
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
        env={**os.environ, "DJANGO_DEBUG": "false", "RELAY_HTTPS": "true", "DJANGO_ALLOWED_HOSTS": "relay.example.com",
             "DJANGO_SECRET_KEY": "x7Lq9-production-like-secret-key-Zr4Tn8Wm2Pv6Yc1Hs5Jd0Kf3Gb",
             "RELAY_METRICS_TOKEN": "metrics-token-for-the-check"},
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_warns_that_metrics_are_public_without_a_token():
    env = {key: value for key, value in os.environ.items() if key != "RELAY_METRICS_TOKEN"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT,
        env={**env, "DJANGO_DEBUG": "false", "RELAY_HTTPS": "true", "DJANGO_ALLOWED_HOSTS": "relay.example.com",
             "DJANGO_SECRET_KEY": "x7Lq9-production-like-secret-key-Zr4Tn8Wm2Pv6Yc1Hs5Jd0Kf3Gb"},
        capture_output=True, text=True, timeout=60)
    assert "relay.W001" in result.stdout + result.stderr


def test_docker_compose_demands_a_metrics_token_and_gives_it_to_prometheus():
    compose = (ROOT / "docker-compose.yml").read_text()
    assert "${RELAY_METRICS_TOKEN:?" in compose
    assert "credentials_file" in (ROOT / "deploy" / "prometheus.yml").read_text()


def test_the_development_file_of_make_run_turns_no_debug_on(tmp_path):
    """Only `make run` turns debug on; a process that merely starts in the checkout takes
    the file's secret key and nothing else, even from a file an older Relay wrote."""
    dev_file = tmp_path / "relay.env"
    dev_file.write_text("DJANGO_DEBUG=true\nDJANGO_SECRET_KEY=file-key-file-key-file-key-file-key-file-key-0123456789\n")
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_DEBUG", "DJANGO_SECRET_KEY")}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup(); from django.conf import settings; "
                             "print(settings.DEBUG, settings.SECRET_KEY[:8])"], cwd=ROOT,
                            env={**env, "RELAY_ENV_FILE": str(dev_file), "DJANGO_SETTINGS_MODULE": "config.settings"},
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False file-key", result.stderr


def test_docker_compose_demands_a_secret_key():
    compose = (ROOT / "docker-compose.yml").read_text()
    assert "${DJANGO_SECRET_KEY:?" in compose
    assert "change-me" not in compose


def test_debug_is_refused_where_hosts_other_than_this_machine_reach_it():
    result = start_django({"DJANGO_DEBUG": "true", "DJANGO_ALLOWED_HOSTS": "127.0.0.1,relay.example.com"})
    assert result.returncode != 0 and "DJANGO_DEBUG" in result.stderr.strip().splitlines()[-1]
    assert start_django({"DJANGO_DEBUG": "true", "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost"}).returncode == 0


def test_an_error_page_shows_no_local_variable_such_as_a_key_being_used(rf, settings):
    from django.views.debug import ExceptionReporter

    from relay.outbox import build

    settings.DEBUG = True
    marker = secrets.token_hex(16)  # made here, so no source line the page quotes holds it
    secret = f"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw{marker}\n"

    def fails(*args, **kwargs):
        raise ValueError("header folding failed")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "signing_key", lambda domain: ("relay", secret.encode()))
        patch.setattr(build.dkim, "sign", fails)
        try:
            build.dkim_signed(b"From: a@brand.test\r\nSubject: a\x0bb\r\n\r\nhi\r\n", "a@brand.test")
        except ValueError:
            import sys

            page = ExceptionReporter(rf.post("/api/v1/mailboxes/x/messages"), *sys.exc_info()).get_traceback_html()
    assert "header folding failed" in page  # the page is there, with its traceback
    assert marker not in page


WORKER_START = """
import sys
from config.celery import app
app.loader.import_default_modules()  # what a worker does at start, where Celery's Django fixup may check
print("config.urls" in sys.modules)
"""


@pytest.mark.parametrize("skip_checks, checked", [(None, False), ("", True)])
def test_a_worker_starts_without_djangos_checks_unless_asked(skip_checks, checked):
    """`manage.py migrate` runs Django's system checks before any worker starts; a worker
    does not run them again (they import the URLconf and every view) unless
    CELERY_SKIP_CHECKS is set empty."""
    env = {key: value for key, value in os.environ.items() if key != "CELERY_SKIP_CHECKS"}
    if skip_checks is not None:
        env["CELERY_SKIP_CHECKS"] = skip_checks
    result = subprocess.run([sys.executable, "-c", WORKER_START], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == str(checked)
