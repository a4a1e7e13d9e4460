"""A Cyrus IMAP server of the suite's own (Debian's cyrus-imapd 3.6): its own directory,
config files and ports, `master` in the foreground in its own process group, the admin's
password in a sasldb of its own. Mail is delivered over LMTP, as an MX would. Used by
tests/relay/backends/test_cyrus.py and bench/cyrus_read.py; `scripts/test.sh` installs the packages
when they are missing.

    server = CyrusServer(Path(tmp)).start()
    server.deliver("bob@relay.localhost", raw)   # the time.monotonic() of LMTP's 250
    server.accounts()                            # IMAP LIST user/%
    server.stop(); server.start()                # a restart keeps its files
"""
import imaplib
import os
import shutil
import signal
import smtplib
import socket
import subprocess
import time
from pathlib import Path

from tests.ports import free_port

MASTER = "/usr/lib/cyrus/bin/master"
SASLPASSWD = shutil.which("saslpasswd2") or "/usr/sbin/saslpasswd2"
ADMIN, PASSWORD, REALM = "relayadmin", "relay-admin-secret", "relay-cyrus"
# The authserv-id Relay is told the mail server writes (RELAY_AUTHSERV_ID).
AUTHSERV_ID = "mx.cyrus.test"


def installed() -> bool:
    return os.path.exists(MASTER) and os.path.exists(SASLPASSWD)


IMAPD_CONF = """\
configdirectory: {root}/conf
partition-default: {root}/spool
proc_path: {root}/proc
mboxname_lockpath: {root}/lock
sievedir: {root}/sieve
lmtpsocket: {root}/socket/lmtp
idlesocket: {root}/socket/idle
notifysocket: {root}/socket/notify
servername: {realm}
admins: {admin}
sasl_pwcheck_method: auxprop
sasl_auxprop_plugin: sasldb
sasl_sasldb_path: {root}/sasldb2
sasl_mech_list: PLAIN LOGIN
allowplaintext: yes
conversations: yes
httpmodules: jmap
virtdomains: off
unixhierarchysep: yes
altnamespace: no
lmtp_downcase_rcpt: yes
syslog_prefix: relay-test-cyrus
"""

CYRUS_CONF = """\
START {{
  recover cmd="ctl_cyrusdb -r -C {root}/imapd.conf"
}}
SERVICES {{
  imap cmd="imapd -C {root}/imapd.conf" listen="127.0.0.1:{imap}" prefork=0
  lmtp cmd="lmtpd -a -C {root}/imapd.conf" listen="127.0.0.1:{lmtp}" prefork=0
  http cmd="httpd -C {root}/imapd.conf" listen="127.0.0.1:{http}" prefork=0
}}
EVENTS {{
}}
"""


class CyrusServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.imap_port, self.lmtp_port, self.http_port = free_port(), free_port(), free_port()
        self.proc: subprocess.Popen | None = None
        self._configure()

    @property
    def imap_url(self) -> str:
        return f"imap://127.0.0.1:{self.imap_port}"

    @property
    def jmap_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def relay_settings(self) -> dict[str, str]:
        """The environment that points Relay at this server."""
        return {"RELAY_BACKEND": "cyrus", "CYRUS_IMAP_URL": self.imap_url, "CYRUS_JMAP_URL": self.jmap_url,
                "CYRUS_ADMIN_USER": ADMIN, "CYRUS_ADMIN_PASSWORD": PASSWORD, "RELAY_AUTHSERV_ID": AUTHSERV_ID}

    def _configure(self) -> None:
        for folder in ("conf", "spool", "proc", "lock", "sieve", "socket"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        (self.root / "imapd.conf").write_text(IMAPD_CONF.format(root=self.root, realm=REALM, admin=ADMIN))
        (self.root / "cyrus.conf").write_text(CYRUS_CONF.format(root=self.root, imap=self.imap_port,
                                                                lmtp=self.lmtp_port, http=self.http_port))
        # The realm must be the servername, or the admin's sign-in finds no password.
        subprocess.run([SASLPASSWD, "-p", "-c", "-u", REALM, "-f", str(self.root / "sasldb2"), ADMIN],
                       input=PASSWORD.encode(), check=True, capture_output=True, timeout=30)
        if os.geteuid() == 0:  # master drops to the cyrus user, which must own its files
            subprocess.run(["chown", "-R", "cyrus:mail", str(self.root)], check=True, timeout=30)

    # --- running ---------------------------------------------------------------------------------
    def start(self, timeout: float = 30) -> "CyrusServer":
        log = (self.root / "master.log").open("ab")
        self.proc = subprocess.Popen(
            [MASTER, "-D", "-C", str(self.root / "imapd.conf"), "-M", str(self.root / "cyrus.conf"),
             "-p", str(self.root / "master.pid")], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.proc.poll() is not None:
                raise RuntimeError(f"Cyrus's master exited ({self.proc.returncode}); see {self.root}/master.log")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Cyrus did not answer within {timeout} s; see {self.root}/master.log")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.lmtp_port), timeout=1), \
                    socket.create_connection(("127.0.0.1", self.http_port), timeout=1):
                pass
            imap = imaplib.IMAP4("127.0.0.1", self.imap_port, timeout=2)
            imap.login(ADMIN, PASSWORD)
            imap.logout()
            return True
        except (OSError, imaplib.IMAP4.error):
            return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    # --- what tests do to it ----------------------------------------------------------------------
    def deliver(self, recipient: str, raw: bytes, sender: str = "sender@example.com") -> float:
        """Deliver over LMTP; the time.monotonic() of the 250. Raises SMTPRecipientsRefused
        (550) for an address with no account."""
        with smtplib.LMTP("127.0.0.1", self.lmtp_port, timeout=30) as lmtp:
            lmtp.sendmail(sender, [recipient], raw)
            return time.monotonic()

    def _admin(self) -> imaplib.IMAP4:
        imap = imaplib.IMAP4("127.0.0.1", self.imap_port, timeout=10)
        imap.login(ADMIN, PASSWORD)
        return imap

    def accounts(self) -> set[str]:
        """The accounts Cyrus holds (IMAP LIST user/%)."""
        imap = self._admin()
        try:
            _, lines = imap.list('""', "user/%")
        finally:
            imap.logout()
        return {line.decode().rsplit(" ", 1)[1].strip('"')[len("user/"):] for line in lines if line}

    def remove_accounts(self) -> None:
        """Delete every account, so that a test starts on an empty server."""
        names = self.accounts()
        imap = self._admin()
        try:
            for name in names:
                imap.setacl(f"user/{name}", ADMIN, "lrswipkxtecda")
                imap.delete(f"user/{name}")
        finally:
            imap.logout()
