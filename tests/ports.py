"""A free port on the loopback, without Django: the servers the suite and the benchmarks
start (tests/cyrus_server.py) pick theirs before Relay's settings are read."""
import socket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
