"""The TypeScript client (clients/typescript/, the npm package relay-client): its types against
Relay's OpenAPI schema, `tsc --noEmit` over it and an example Playwright spec, Node's own
test runner against a live Relay (a gunicorn web process, mail over a real SMTP socket, a
sandbox's mail sent by nodemailer to the submission port and one released through the
outbox's worker and mailer to an SMTP sink, Playwright's runner over the relaySandbox
fixture), the checked-in dist/ against a fresh compile, and each install command of
docs/client-typescript.md run as written into an empty folder. npm installs its dev
dependencies from the lock file (scripts/test.sh does it once; no browser is downloaded)."""
import base64
import filecmp
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from accounts.services import account_create_with_key
from tests.conftest import SmtpServerThread
from tests.helpers import ROOT
from tests.ports import free_port
from tests.relay.outbox.test_release import resent_block
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


def test_the_checked_in_dist_is_what_src_compiles_to(tmp_path):
    # An install builds nothing (docs/client-typescript.md), so dist/ must follow src/.
    run([*NPX, "tsc", "-p", "tsconfig.build.json", "--outDir", str(tmp_path / "dist")])
    fresh = sorted(path.name for path in (tmp_path / "dist").iterdir())
    shipped = sorted(path.name for path in (PACKAGE / "dist").iterdir()) if (PACKAGE / "dist").is_dir() else []
    assert fresh == shipped, "clients/typescript/dist/ is not src/ compiled: run `npm run build` there"
    _, differing, _ = filecmp.cmpfiles(tmp_path / "dist", PACKAGE / "dist", fresh, shallow=False)
    assert not differing, f"clients/typescript/dist/ is not src/ compiled ({differing}): run `npm run build` there"


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


@pytest.fixture
def smtp_server_with_submission(transactional_db, certificates, settings):
    """The suite's SMTP server, taking mail to Relay's addresses and, on a submission port of
    its own, the sandboxes' (nodemailer's, over STARTTLS with a certificate the test's own
    authority signed, which the Node tests trust as RELAY_TEST_CA)."""
    settings.RELAY_SMTP_TLS_CERT = str(certificates / "server.pem")
    settings.RELAY_SMTP_TLS_KEY = str(certificates / "server.key")
    server = SmtpServerThread(submission_port=free_port()).start()
    yield server
    server.stop()


def test_node_test_runner_against_a_live_relay(processes, smtp_server_with_submission, sink, certificates, tmp_path):
    """Node's runner over test/*.test.mjs; then, for the catch a Node test released, what
    the next hop (the SMTP sink) got: the caught bytes behind a Resent-* block, enveloped
    to the address named and to no one else."""
    smtp_server = smtp_server_with_submission
    released = tmp_path / "released.jsonl"
    # Mail sent goes out through a worker and a mailer to an SMTP sink (waitForDelivery).
    processes.env["EMAIL_URL"] = f"smtp://127.0.0.1:{sink[1]}"
    processes.worker("sender")
    processes.mailer("mailer")
    # A sandbox's settings name the submission port, as the web process is told it.
    submission_port = smtp_server.submission_port
    # The web process names the security the SMTP process offers (starttls): it has the certificate too.
    base = processes.start_web(env={"RELAY_MAX_OPEN_WAITS": "3", "RELAY_SUBMISSION_PORT": str(submission_port),
                                    "RELAY_SMTP_TLS_CERT": str(certificates / "server.pem"),
                                    "RELAY_SMTP_TLS_KEY": str(certificates / "server.key")})
    _, key = account_create_with_key(login="typescript", plan="pro")
    _, busy_key = account_create_with_key(login="typescript-busy", plan="pro")
    secret, body, now = new_secret(), '{"type":"message.received"}', int(time.time())
    webhook = {"body": body, "secret": secret, "headers": {
        "webhook-id": "msg_1", "webhook-timestamp": str(now), "webhook-signature": sign(secret, "msg_1", now,
                                                                                      body.encode())}}
    out = run(["node", "--test", "--test-timeout=60000", "--test-reporter=spec", *sorted(str(path) for path in (PACKAGE / "test").glob("*.test.mjs"))], env={
        "RELAY_URL": base, "RELAY_API_KEY": key, "RELAY_BUSY_API_KEY": busy_key, "RELAY_SMTP_PORT": str(smtp_server.port),
        "RELAY_SUBMISSION_PORT": str(submission_port), "RELAY_TEST_CA": str(certificates / "ca.pem"),
        "RELAY_TEST_WEBHOOK": json.dumps(webhook), "RELAY_RELEASE_RECORD": str(released)}, timeout=300)
    assert "# fail 0" in out or "ℹ fail 0" in out, out

    [release] = [json.loads(line) for line in released.read_text().splitlines()]
    raw = base64.b64decode(release["raw"])
    [envelope] = [envelope for envelope in sink[0].received if release["to"] in envelope.rcpt_tos]
    assert envelope.rcpt_tos == [release["to"]]  # never the catch's To, Cc or Bcc
    block = resent_block(envelope.original_content, raw)
    assert [name for name, _ in block] == ["Resent-From", "Resent-To", "Resent-Date", "Resent-Message-ID"]
    assert (dict(block)["Resent-From"], dict(block)["Resent-To"]) == (release["from"], release["to"])


def install_commands() -> list[str]:
    """The console blocks of docs/client-typescript.md's Install section."""
    text = (ROOT / "docs" / "client-typescript.md").read_text()
    section = text[text.index("## Install"):text.index("\n## ", text.index("## Install") + 1)]
    return re.findall(r"```console\n(.*?)```", section, re.S)


def fresh_checkout(destination) -> None:
    """The checkout's files as a clone has them: what git tracks (or would), nothing built
    or installed here (node_modules, a tarball)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "clients/typescript"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)


def test_the_docs_have_two_ways_to_install():
    assert [block.count("npm ") for block in install_commands()] == [1, 2]


@pytest.mark.parametrize("way", [0, 1], ids=["installed-from-the-checkout", "packed-then-installed"])
def test_each_documented_install_works_as_written_in_an_empty_folder(way, tmp_path, processes):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    fresh_checkout(tmp_path / "relay")
    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text('{"name": "project", "private": true, "type": "module"}')
    # The doc's commands as written, from the project's folder, beside the checkout in ../relay.
    run(["bash", "-euo", "pipefail", "-c", install_commands()[way]], cwd=project,
        env={"npm_config_audit": "false", "npm_config_fund": "false", "npm_config_loglevel": "error"})
    installed = sorted(path.name for path in (project / "node_modules").iterdir() if not path.name.startswith("."))
    assert installed == ["relay-client"], f"no runtime dependency, yet npm installed {installed}"
    assert not (project / "node_modules" / "relay-client").is_symlink()  # a copy: imports resolve from the project

    base = processes.start_web()
    _, key = account_create_with_key(login=f"installed-{way}", plan="pro")
    (project / "use.mjs").write_text(
        'import { Relay, withMailbox } from "relay-client";\n'
        "const address = await withMailbox(async box => box.address);\n"
        "const gone = await new Relay().listMailboxes();\n"
        'console.log(JSON.stringify({address, left: gone.length}));\n')
    answer = json.loads(run(["node", "use.mjs"], cwd=project, env={"RELAY_URL": base, "RELAY_API_KEY": key}))
    assert "@" in answer["address"] and answer["left"] == 0
    types = (project / "node_modules" / "relay-client" / "dist" / "index.d.ts").read_text()
    assert "waitForCode" in types and "checkMessage" in types
