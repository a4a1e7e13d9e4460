"""The TypeScript client (clients/typescript/, the npm package relay-client): its types against
Relay's OpenAPI schema, `tsc --noEmit` over it and an example Playwright spec, Node's own
test runner against a live Relay (a gunicorn web process, mail over a real SMTP socket), and
`npm pack` installed into an empty folder. npm installs its dev dependencies from the lock
file (scripts/test.sh does it once; no browser is downloaded)."""
import json
import os
import shutil
import subprocess
import time

import pytest

from accounts.services import account_create_with_key
from tests.helpers import ROOT
from webhooks.signing import new_secret, sign

PACKAGE = ROOT / "clients" / "typescript"
NPX = [shutil.which("npx") or "npx", "--no-install"]

pytestmark = pytest.mark.skipif(not (PACKAGE / "node_modules" / "typescript").exists(),
                                reason="needs clients/typescript/node_modules (scripts/test.sh runs npm ci there)")


def run(command: list[str], *, cwd=PACKAGE, env: dict | None = None, timeout: float = 180) -> str:
    done = subprocess.run(command, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def built():
    """dist/ compiled from src/ as `npm pack` would."""
    shutil.rmtree(PACKAGE / "dist", ignore_errors=True)
    run([*NPX, "tsc", "-p", "tsconfig.build.json"])
    return PACKAGE / "dist"


def test_the_checked_in_types_are_those_of_relays_schema(tmp_path):
    schema = tmp_path / "openapi.json"
    # As scripts/typescript-types.sh makes it: PostgreSQL's integer ranges, whatever this machine runs.
    run([str(ROOT / ".venv" / "bin" / "python"), "manage.py", "spectacular", "--format", "openapi-json", "--file",
         str(schema)], cwd=ROOT, env={"DATABASE_URL": "postgres://relay@127.0.0.1:5432/relay"})
    run([*NPX, "openapi-typescript", str(schema), "-o", str(tmp_path / "schema.ts")])
    fresh = (tmp_path / "schema.ts").read_text()
    assert "/api/v1/mailboxes/{mailbox_id}/messages/{message_id}/checks/html" in fresh
    assert fresh == (PACKAGE / "src" / "schema.ts").read_text(), (
        "clients/typescript/src/schema.ts is not what Relay's schema gives: run scripts/typescript-types.sh")


def test_the_package_and_the_example_playwright_spec_type_check():
    run([*NPX, "tsc", "--noEmit", "-p", "tsconfig.json"])


def test_node_test_runner_against_a_live_relay(built, processes, smtp_server, sink):
    # Mail sent goes out through a worker and a mailer to an SMTP sink (waitForDelivery).
    processes.env["EMAIL_URL"] = f"smtp://127.0.0.1:{sink[1]}"
    processes.worker("sender")
    processes.mailer("mailer")
    base = processes.start_web(env={"RELAY_MAX_OPEN_WAITS": "3"})
    _, key = account_create_with_key(login="typescript", plan="pro")
    _, busy_key = account_create_with_key(login="typescript-busy", plan="pro")
    secret, body, now = new_secret(), '{"type":"message.received"}', int(time.time())
    webhook = {"body": body, "secret": secret, "headers": {
        "webhook-id": "msg_1", "webhook-timestamp": str(now), "webhook-signature": sign(secret, "msg_1", now,
                                                                                      body.encode())}}
    out = run(["node", "--test", "--test-timeout=60000", "--test-reporter=spec", *sorted(str(path) for path in (PACKAGE / "test").glob("*.test.mjs"))], env={
        "RELAY_URL": base, "RELAY_API_KEY": key, "RELAY_BUSY_API_KEY": busy_key, "RELAY_SMTP_PORT": str(smtp_server.port),
        "RELAY_TEST_WEBHOOK": json.dumps(webhook)}, timeout=300)
    assert "# fail 0" in out or "ℹ fail 0" in out, out


def test_npm_pack_installs_into_an_empty_folder_and_runs(built, tmp_path, processes):
    base = processes.start_web()
    _, key = account_create_with_key(login="packed", plan="pro")
    tarball = run(["npm", "pack", "--silent", "--pack-destination", str(tmp_path)]).strip().splitlines()[-1]
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    (consumer / "package.json").write_text('{"name": "consumer", "private": true, "type": "module"}')
    run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", str(tmp_path / tarball)], cwd=consumer)
    installed = sorted(path.name for path in (consumer / "node_modules").iterdir() if not path.name.startswith("."))
    assert installed == ["relay-client"], f"no runtime dependency, yet npm installed {installed}"
    (consumer / "use.mjs").write_text(
        'import { Relay, withMailbox } from "relay-client";\n'
        "const address = await withMailbox(async box => box.address);\n"
        "const gone = await new Relay().listMailboxes();\n"
        'console.log(JSON.stringify({address, left: gone.length}));\n')
    answer = json.loads(run(["node", "use.mjs"], cwd=consumer, env={"RELAY_URL": base, "RELAY_API_KEY": key}))
    assert "@" in answer["address"] and answer["left"] == 0
    types = (consumer / "node_modules" / "relay-client" / "dist" / "index.d.ts").read_text()
    assert "waitForCode" in types and "checkMessage" in types
