"""A bad setting stops start-up with a message naming the variable."""
import os
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
    ({"CELERY_BROKER_URL": "amqp://x"}, "CELERY_BROKER_URL"),
    ({"RELAY_DOMAINS": " , "}, "RELAY_DOMAINS"),
    ({"RELAY_CLEANUP_LEASE_SECONDS": "1"}, "RELAY_CLEANUP_LEASE_SECONDS"),
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
