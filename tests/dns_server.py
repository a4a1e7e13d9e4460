"""A DNS server of the suite's own (Debian's NSD 4): authoritative for the zones `test.`
and `relay.localhost.`, on a loopback port of its own, with zone files the tests write.
Relay looks every name up there (RELAY_DNS_RESOLVERS, set by tests/conftest.py for the
whole session); a name in no zone is REFUSED at once. `scripts/test.sh` installs the
package when it is missing.

    server = DnsServer(Path(tmp)).start()
    server.publish("shop.test", "TXT", "v=spf1 ip4:127.0.0.2 -all")   # served when it returns
    server.withdraw("shop.test")                                      # every record at that name
"""
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype

NSD = shutil.which("nsd") or "/usr/sbin/nsd"
ZONES = ("test", "relay.localhost")

NSD_CONF = """\
server:
  ip-address: 127.0.0.1@{port}
  port: {port}
  username: ""
  chroot: ""
  zonesdir: {root}
  database: ""
  pidfile: {root}/nsd.pid
  xfrdfile: {root}/xfrd.state
  zonelistfile: {root}/zone.list
  logfile: {root}/nsd.log
  server-count: 1
  do-ip6: no
  verbosity: 1
remote-control:
  control-enable: no
"""


def installed() -> bool:
    return os.path.exists(NSD)


def _quoted(value: str) -> str:
    """A TXT value as zone-file character-strings of at most 255 bytes each."""
    parts = [value[i:i + 250] for i in range(0, len(value), 250)] or [""]
    return " ".join('"' + part.replace("\\", "\\\\").replace('"', '\\"') + '"' for part in parts)


class DnsServer:
    def __init__(self, root: Path, port: int, *, ttl: int = 1) -> None:
        self.root, self.port, self.ttl = root, port, ttl
        self.records: dict[str, list[tuple[str, str, str]]] = {zone: [] for zone in ZONES}
        self.serial = int(time.time())
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def _zone_of(self, name: str) -> str:
        name = name.rstrip(".").lower()
        for zone in ZONES:
            if name == zone or name.endswith("." + zone):
                return zone
        raise ValueError(f"{name} is in none of the test zones {ZONES}")

    def _write(self, zone: str) -> None:
        lines = [f"$ORIGIN {zone}.", f"$TTL {self.ttl}",
                 f"@ IN SOA ns.{zone}. admin.{zone}. {self.serial} 3600 600 86400 1", f"@ IN NS ns.{zone}.",
                 f"ns IN A 127.0.0.1"]
        for name, rtype, value in self.records[zone]:
            data = _quoted(value) if rtype == "TXT" else value
            lines.append(f"{name}. IN {rtype} {data}")
        (self.root / f"{zone}.zone").write_text("\n".join(lines) + "\n")

    def start(self) -> "DnsServer":
        self.root.mkdir(parents=True, exist_ok=True)
        config = NSD_CONF.format(port=self.port, root=self.root)
        for zone in ZONES:
            config += f"zone:\n  name: {zone}\n  zonefile: {zone}.zone\n"
            self._write(zone)
        (self.root / "nsd.conf").write_text(config)
        self.proc = subprocess.Popen([NSD, "-d", "-c", str(self.root / "nsd.conf")], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_for_serial("test")
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)

    def _serial_served(self, zone: str) -> int | None:
        query = dns.message.make_query(f"{zone}.", dns.rdatatype.SOA)
        try:
            answer = dns.query.udp(query, "127.0.0.1", port=self.port, timeout=0.5)
        except Exception:
            return None
        return answer.answer[0][0].serial if answer.answer else None

    def _wait_for_serial(self, zone: str) -> None:
        """Until the new serial is served, and served by every process answering: a reload
        starts NSD's new server process before the old one quits, and for that moment
        either may take a query (seen on a busy machine: a record published and its serial
        served, then looked up and not found). Five answers in a row, 10 ms apart, come
        from a server with the new zone."""
        deadline, in_a_row = time.monotonic() + 10, 0
        while in_a_row < 5:
            in_a_row = in_a_row + 1 if self._serial_served(zone) == self.serial else 0
            if self.proc.poll() is not None:
                raise RuntimeError(f"nsd exited: {(self.root / 'nsd.log').read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"nsd did not serve serial {self.serial} of {zone} within 10 s")
            time.sleep(0.01 if in_a_row else 0.02)

    def _reload(self, zone: str) -> None:
        """Write the zone with a new serial, have NSD reload it, and wait until it serves it."""
        self.serial += 1
        self._write(zone)
        os.kill(self.proc.pid, signal.SIGHUP)
        self._wait_for_serial(zone)

    def publish(self, name: str, rtype: str, value: str) -> None:
        with self.lock:
            zone = self._zone_of(name)
            self.records[zone].append((name.rstrip(".").lower(), rtype, value))
            self._reload(zone)

    def withdraw(self, name: str, rtype: str | None = None) -> None:
        with self.lock:
            zone = self._zone_of(name)
            name = name.rstrip(".").lower()
            self.records[zone] = [record for record in self.records[zone]
                                  if not (record[0] == name and rtype in (None, record[1]))]
            self._reload(zone)


class DroppingForwarder:
    """A resolver in front of NSD that never answers for names under `silent` (a
    nameserver gone quiet, for the names a sender chose) and passes every other query
    to NSD as it is."""

    def __init__(self, upstream_port: int, silent: str) -> None:
        self.upstream_port, self.silent = upstream_port, silent.rstrip(".").lower()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.dropped = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                data, client = self.sock.recvfrom(65535)
            except OSError:
                return  # closed
            try:
                query = dns.message.from_wire(data)
                name = query.question[0].name.to_text(omit_final_dot=True).lower()
            except Exception:
                continue
            if name == self.silent or name.endswith("." + self.silent):
                self.dropped += 1
                continue
            try:
                answer = dns.query.udp(query, "127.0.0.1", port=self.upstream_port, timeout=2)
                self.sock.sendto(answer.to_wire(), client)
            except Exception:
                continue

    def close(self) -> None:
        self.sock.close()
