"""DKIM keys for the suite, made by an independent tool (opendkim-genkey), and mail
signed and checked by another (Perl's Mail::DKIM, tests/dkim_tool.pl): Relay's dkimpy
is never checked against itself."""
import re
import shutil
import subprocess
from pathlib import Path

TOOL = Path(__file__).resolve().parent / "dkim_tool.pl"



def available() -> bool:
    if not shutil.which("opendkim-genkey") or not shutil.which("perl"):
        return False
    return subprocess.run(["perl", "-MMail::DKIM", "-e1"], capture_output=True).returncode == 0


def new_key(directory: Path, domain: str, selector: str) -> tuple[Path, str]:
    """A fresh RSA key for `domain`: its private key file and the TXT record to publish."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["opendkim-genkey", "-b", "2048", "-D", str(directory), "-d", domain, "-s", selector],
                   check=True, capture_output=True)
    record = "".join(re.findall(r'"([^"]*)"', (directory / f"{selector}.txt").read_text()))
    return directory / f"{selector}.private", record


def sign(raw: bytes, domain: str, selector: str, key_file: Path, method: str = "relaxed",
         headers: str = "from:to:subject:date:message-id") -> bytes:
    """`raw` with a DKIM-Signature on top; `method`: its c= (relaxed is relaxed/simple);
    `headers`: the fields it signs."""
    return subprocess.run(["perl", str(TOOL), "sign", domain, selector, str(key_file), method, headers], input=raw,
                          capture_output=True, check=True, timeout=30).stdout


def verify(raw: bytes, dns_port: int) -> list[tuple[str, str, str]]:
    """(result, domain, selector) of each signature, as Mail::DKIM finds them."""
    out = subprocess.run(["perl", str(TOOL), "verify", str(dns_port)], input=raw, capture_output=True, check=True,
                         timeout=30).stdout.decode()
    return [tuple(line.split()) for line in out.splitlines() if line.strip()]
