"""Schemathesis over the live API, driven by its own OpenAPI schema, with every check it
has: no server errors, no response that breaks the schema, no undocumented status code.
Bounded in time; once with an owner's key and once without credentials."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accounts.services import account_create_with_key
from tests.helpers import ROOT, free_port

pytestmark = pytest.mark.workers

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")


def fuzz(port: int, *headers: str, seconds: int) -> subprocess.CompletedProcess:
    # One worker thread: with two, schemathesis parses Python source (ast) in both threads
    # at once, and CPython 3.11 keeps the AST builder's recursion depth per interpreter,
    # not per thread, so it crashes now and then with "AST constructor recursion depth
    # mismatch" (a tool crash, not a finding; seen on GET /keys).
    args = [SCHEMATHESIS, "--config-file", str(ROOT / "tests" / "schemathesis.toml"), "run",
            f"http://127.0.0.1:{port}/api/schema/", "--checks", "all",
            "--max-time", str(seconds), "--workers", "1", "--no-color", "--seed", "1"]
    for header in headers:
        args += ["-H", header]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=seconds * 4 + 120)


@pytest.fixture
def live_api(processes):
    port = free_port()
    # Webhook URLs on this machine are allowed, or every schema-valid POST /webhooks the
    # fuzzer makes (it aims them at 127.0.0.1) would be a policy refusal it cannot foresee.
    processes.web("web", port, workers=2, env={"RELAY_ANON_CREATE_RATE": "100000/hour",
                                               "RELAY_WEBHOOK_ALLOW_PRIVATE": "true"})
    processes.wait_ready()
    return port


@pytest.mark.parametrize("credentials", ["owner key", "none"])
def test_the_api_survives_schema_driven_fuzzing(live_api, credentials):
    headers = []
    if credentials == "owner key":
        _, key = account_create_with_key(login="fuzzer", plan="enterprise")
        headers.append(f"Authorization: Bearer {key}")
    result = fuzz(live_api, *headers, seconds=15)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    tally = re.search(r"(\d+) generated, (\d+) passed([^\n]*)", result.stdout)
    assert tally and tally.group(1) == tally.group(2) and "fail" not in tally.group(3), report
