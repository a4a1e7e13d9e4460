"""Hosts of the suite's own on this machine (tests/test_hosts.py): network namespaces, each
with its own address on a veth link to this one, reaching PostgreSQL, Redis and the
stand-in Stalwart through TCP forwarders on their link's gateway. A host's link can be
cut and restored (`ip link set … down/up`), and a process on it can run with its clock
off (libfaketime), so Relay's processes meet what separate machines bring: other
addresses, clocks that disagree, a network that goes away."""
import asyncio
import itertools
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass

SUBNET = "10.231"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def why_no_hosts() -> str | None:
    """Why hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (the suite and CI run as root)"
    for tool in ("ip", "faketime"):
        if not shutil.which(tool):
            return f"`{tool}` is not installed (scripts/test.sh installs iproute2 and faketime where it may)"
    probe = f"relay-probe-{os.getpid()}"
    try:
        _ip("netns", "add", probe)
        _ip("netns", "del", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"`ip netns add` failed here: {getattr(exc, 'stderr', b'').decode(errors='replace').strip() or exc}"
    return None


@dataclass
class Host:
    name: str
    namespace: str
    link: str  # the veth end on this side
    gateway: str  # this side's address: where the host reaches the forwarders
    address: str  # the host's own

    def command(self, argv: list[str], *, clock_offset: str | None = None) -> list[str]:
        """`argv` run on this host, with its clock `clock_offset` off ("+5m", "-3m")."""
        skew = ["faketime", "-f", clock_offset] if clock_offset else []
        return ["ip", "netns", "exec", self.namespace, *skew, *argv]


class Forwarder:
    """TCP from every host's gateway address, on one port, to a port on this machine's
    loopback, in a thread of its own."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.loop = asyncio.new_event_loop()
        self.servers = []
        self.writers = set()  # every open connection, both ends: closed with the forwarder
        threading.Thread(target=self.loop.run_forever, daemon=True, name="forwarder").start()

    async def _pipe(self, reader, writer) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _serve(self, reader, writer) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self.writers |= {writer, target_writer}
        await asyncio.gather(self._pipe(reader, target_writer), self._pipe(target_reader, writer))
        self.writers -= {writer, target_writer}

    def listen(self, address: str, port: int) -> None:
        async def start():
            return await asyncio.start_server(self._serve, address, port)

        self.servers.append(asyncio.run_coroutine_threadsafe(start(), self.loop).result(10))

    def close(self) -> None:
        async def close_all():
            for server in self.servers:
                server.close()
            for writer in list(self.writers):
                writer.close()
            # The connections' own tasks end here, not with the interpreter.
            pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


class Hosts:
    """Namespaces made for one test, removed after it."""

    _numbers = itertools.count(1)

    def __init__(self) -> None:
        self.hosts: dict[str, Host] = {}
        self.forwarders: list[Forwarder] = []
        self.tag = os.getpid() % 1000

    def add(self, name: str) -> Host:
        number = next(self._numbers) % 250 + 1
        namespace, link, peer = f"relay{self.tag}-{name}", f"rl{self.tag}h{number}a", f"rl{self.tag}h{number}b"
        gateway, address = f"{SUBNET}.{number}.1", f"{SUBNET}.{number}.2"
        _ip("netns", "add", namespace)
        _ip("link", "add", link, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", namespace)
        _ip("addr", "add", f"{gateway}/30", "dev", link)
        _ip("link", "set", link, "up")
        for args in (["addr", "add", f"{address}/30", "dev", peer], ["link", "set", peer, "up"],
                     ["link", "set", "lo", "up"], ["route", "add", "default", "via", gateway]):
            _ip("-n", namespace, *args)
        host = self.hosts[name] = Host(name, namespace, link, gateway, address)
        return host

    def forward(self, target_port: int, port: int) -> None:
        """Every host reaches this machine's `target_port` at its gateway's `port`."""
        forwarder = Forwarder(target_port)
        self.forwarders.append(forwarder)
        for host in self.hosts.values():
            forwarder.listen(host.gateway, port)

    def cut(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].link, "down")

    def restore(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].link, "up")

    def remove_all(self) -> None:
        for forwarder in self.forwarders:
            forwarder.close()
        for host in self.hosts.values():
            subprocess.run(["ip", "link", "del", host.link], capture_output=True, timeout=10)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, timeout=10)
        self.hosts.clear()
