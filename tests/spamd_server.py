"""SpamAssassin's spamd of the suite's own (Debian's `spamassassin` and `spamd`), on a
loopback port of its own, with its state under a temp dir and no network tests (`--local`:
no DNS block lists, so a verdict does not depend on this machine's resolver).
`scripts/test.sh` installs the packages when they are missing.

    server = SpamdServer(Path(tmp), free_port()).start()   # once it answers
    server.url                                              # spamd://127.0.0.1:PORT
    server.stop()
"""
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SPAMD = shutil.which("spamd") or "/usr/sbin/spamd"


def installed() -> bool:
    return os.path.exists(SPAMD)


class SpamdServer:
    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"spamd://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> "SpamdServer":
        self.root.mkdir(parents=True, exist_ok=True)
        log = (self.root / "spamd.log").open("ab")
        user = ["--username=nobody"] if os.geteuid() == 0 else []
        self.process = subprocess.Popen(
            [SPAMD, f"--listen=127.0.0.1:{self.port}", "--allowed-ips=127.0.0.1", "--local", "--max-children=2",
             "--min-children=1", "--nouser-config", "--syslog=stderr", f"--pidfile={self.root / 'spamd.pid'}",
             f"--helper-home-dir={self.root}", *user],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"spamd did not start:\n{(self.root / 'spamd.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        return self

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as connection:
                connection.sendall(b"PING SPAMC/1.5\r\n\r\n")
                return b"PONG" in connection.recv(100)
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
