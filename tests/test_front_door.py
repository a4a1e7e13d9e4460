"""The front door as a newcomer meets it: `make run`'s script on its embedded defaults
(SQLite, the filesystem broker), the README's commands run as written against it, a
clean Ctrl-C, and a clear word when a port is taken."""
import json
import os
import re
import signal
import socket
import subprocess
import urllib.request

import pytest

from tests.helpers import ROOT, free_port, wait_until

pytestmark = pytest.mark.workers

# What `make run` must not inherit from the test run: it is meant to start on its own
# defaults, as in a fresh clone.
NOT_INHERITED = ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_DEBUG", "DJANGO_SECRET_KEY", "RELAY_ENV_FILE",
                 "RELAY_BACKEND", "RELAY_SWEEP_INTERVAL_SECONDS", "RELAY_CLEANUP_RETRY_BACKOFF_SECONDS",
                 "RELAY_CLEANUP_LEASE_SECONDS")


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def as_from_a_terminal() -> None:
    """In the child, before exec: Ctrl-C's signals at their defaults, as a shell started
    from a terminal has them. A test suite launched in the background (`make test &`,
    nohup, a job runner) hands its children SIGINT ignored, and bash cannot trap a signal
    that was ignored when it started: run.sh would never see the Ctrl-C the test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class Stack:
    def __init__(self, tmp_path, **env) -> None:
        self.web, self.smtp, self.submission = free_port(), free_port(), free_port()
        self.env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
        self.env.update({"RELAY_VAR_DIR": str(tmp_path / "var"), "RELAY_WEB_PORT": str(self.web),
                         "RELAY_SMTP_PORT": str(self.smtp), "RELAY_SUBMISSION_PORT": str(self.submission), **env})
        self.log = tmp_path / "run.log"
        self.proc = None

    def start(self) -> "Stack":
        self.proc = subprocess.Popen(["scripts/run.sh"], cwd=ROOT, env=self.env, stdout=self.log.open("wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=as_from_a_terminal)
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        wait_until(lambda: self.answers() or self.proc.poll() is not None, timeout=90, interval=0.25,
                   message="make run's web process")
        assert self.proc.poll() is None, self.output()[-3000:]
        wait_until(lambda: "SMTP listening" in self.output() and " ready." in self.output(), timeout=60,
                   interval=0.25, message="the SMTP server and the worker")

    def answers(self) -> bool:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{self.web}/api/v1/", timeout=2).status == 200
        except OSError:
            return False

    def interrupt(self) -> int:
        """Ctrl-C, as a terminal sends it: SIGINT to the whole process group."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def stack(tmp_path):
    # The README's dead-letter demo runs on this stack too: small TTLs, failing cleanups.
    running = Stack(tmp_path, RELAY_MIN_TTL_MS="2000", RELAY_LOCAL_FAIL_CLEANUP_PREFIX="fail-").start()
    yield running
    running.stop()


def test_the_readme_commands_work_as_written_and_ctrl_c_stops_cleanly(stack):
    stack.wait_ready()
    # The README's sh blocks, in order, in one shell; only the ports differ from the page.
    script = "\n".join(readme_blocks("sh"))
    script = script.replace("127.0.0.1:8000", f"127.0.0.1:{stack.web}").replace("2525", str(stack.smtp))
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=stack.env,
                            capture_output=True, text=True, timeout=180)
    out = result.stdout
    assert result.returncode == 0, f"{out[-3000:]}{result.stderr[-3000:]}\nmake run's log:\n{stack.output()[-6000:]}"
    assert out.startswith("Welcome\n")  # the quick start: an anonymous mailbox, a mail over SMTP, its wait
    assert '"status":"active"' in out and "Your code is 4821." in out  # created, mailed, read
    assert '"envelope_from":"me@example.com"' in out
    assert '"status":"queued"' in out  # a send
    assert '"subject":"Hello","participants":' in out and '"message_count":2' in out  # the reply's thread
    assert "\n204\n" in out and '{"code":"not_found","message":"Not found."}' in out  # deleted
    # Each answer on a line of its own, as a person reads them.
    for line in out.splitlines():
        if line.startswith(("{", "[")):
            json.loads(line)
    assert re.search(r"fail-demo@relay\.localhost\s+expired\s+attempts=1", out)  # the dead letter
    assert '"dead": 1' in out
    assert '"verdict": "none"' in out and '{"count":0,' in out  # nothing proves example.com sent it
    assert "TXT relay._domainkey.mail.example.com v=DKIM1; k=rsa; p=" in out and '"status":"pending"' in out

    # What the banner's first URL and the site root show.
    index = urllib.request.urlopen(f"http://127.0.0.1:{stack.web}/api/v1/", timeout=5).read().decode()
    assert '"docs"' in index and "/api/v1/mailboxes" in index
    # The agents' door is named, and the route templates read as templates.
    assert f'"mcp":"http://127.0.0.1:{stack.web}/mcp"' in index
    assert "/api/v1/mailboxes/{mailbox_id}/messages" in index and "%7B" not in index
    assert f"http://127.0.0.1:{stack.web}/mcp" in stack.output()  # the banner
    home = urllib.request.urlopen(f"http://127.0.0.1:{stack.web}/", timeout=5).read().decode()
    assert "Get an address" in home and 'href="/api/docs/"' in home  # the web inbox, linking the docs
    assert f"http://127.0.0.1:{stack.web}/ " in stack.output()  # the banner's inbox line
    assert f"Relay is ready: http://127.0.0.1:{stack.web}/" in stack.output()  # said once it answers
    # The page's own files, as a browser fetches them after it, served whole.
    for asset in re.findall(r'(?:href|src)="(/static/[^"]+)"', home):
        served = urllib.request.urlopen(f"http://127.0.0.1:{stack.web}{asset}", timeout=5)
        assert served.status == 200 and served.read(), asset

    output_before = stack.output()
    # Nothing went wrong along the way: the one error is the dead letter the README makes.
    errors = [line for line in output_before.splitlines()
              if " ERROR " in line or "ERROR/" in line or "Traceback" in line]
    assert all("fail-demo" in line or "dead letter" in line for line in errors), errors
    assert stack.interrupt() == 0
    log = stack.output()
    assert "stopping Relay" in log and "a Relay process exited" not in log
    # Every line of the processes is named, and the idle sweep stays quiet.
    assert re.search(r"^web   \| ", output_before, re.M) and re.search(r"^worker\| ", output_before, re.M)
    assert "No hostname was supplied" not in log
    assert "StreamingHttpResponse must consume synchronous iterators" not in log
    assert "Task expiry.tasks.sweep" not in log and "Sending due task" not in log


def test_the_quick_start_says_in_one_line_that_relay_is_not_running():
    closed = free_port()  # nothing listens there
    quick_start = readme_blocks("sh")[0].replace("127.0.0.1:8000", f"127.0.0.1:{closed}")
    # As pasted into an interactive shell: no -e, every line that can run runs.
    result = subprocess.run(["bash", "-c", quick_start], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and result.stdout == ""
    [said] = result.stderr.splitlines() or [""]
    assert said.startswith("curl: (7) Failed to connect to 127.0.0.1 port") and str(closed) in said, result.stderr


def test_a_port_in_use_is_named_with_the_variable_that_moves_it(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        stack = Stack(tmp_path)
        stack.web = taken.getsockname()[1]
        stack.env["RELAY_WEB_PORT"] = str(stack.web)
        stack.start()
        try:
            assert stack.proc.wait(60) == 1
        finally:
            stack.stop()
    assert f"port {stack.web}" in stack.output() and "RELAY_WEB_PORT" in stack.output()


def test_ctrl_c_on_a_terminal_stops_make_run_with_exit_0(tmp_path):
    """As a person sees it: `make run` on a terminal (a pty), then Ctrl-C typed. The shell
    starts with Ctrl-C ignored, as one started from a background job does: the terminal's
    Ctrl-C must still reach run.sh (a terminal's defaults are the easier case)."""
    import pty
    import select
    import time

    stack = Stack(tmp_path)
    pid, terminal = pty.fork()
    if pid == 0:  # the child: a shell on the pty, as a terminal runs it
        try:
            os.chdir(ROOT)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGQUIT, signal.SIG_IGN)
            os.execvpe("bash", ["bash", "-c", "make run; echo make-exit=$?"], {**stack.env, "TERM": "dumb"})
        finally:
            os._exit(127)  # never go on running the test suite in the forked child
    seen = b""

    def read_until(marker: bytes, seconds: float) -> bool:
        nonlocal seen
        deadline = time.monotonic() + seconds
        while marker not in seen and time.monotonic() < deadline:
            if select.select([terminal], [], [], 0.2)[0]:
                try:
                    seen += os.read(terminal, 65536)
                except OSError:
                    break
        return marker in seen

    try:
        assert read_until(b"SMTP listening", 120), seen.decode(errors="replace")[-2000:]
        assert read_until(b" ready.", 60)
        os.write(terminal, b"\x03")  # Ctrl-C
        assert read_until(b"make-exit=", 60), seen.decode(errors="replace")[-2000:]
    finally:
        os.close(terminal)
        os.waitpid(pid, 0)
    text = seen.decode(errors="replace")
    assert "stopping Relay" in text and "make-exit=0" in text and "make: ***" not in text
