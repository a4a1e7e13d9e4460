"""API: gunicorn (uvicorn workers, or sync ones with --server wsgi) on this machine, load from wrk in another process. Prints requests/s
and p99 latency of GET /api/v1/mailboxes/{id} and POST /api/v1/mailboxes, and their
ratio to GET /api/v1/whoami (a trivial authenticated DRF endpoint) in the same run.

    scripts/bench.sh api [--seconds 15] [--connections 16] [--workers 2] [--server asgi|wsgi]
"""
import argparse
import re
import shutil
import subprocess
import sys
import urllib.request

from bench.common import command_line, fresh_database, record, setup_django, spawn, stop, wait_until

PORT = 8765


def wrk(path: str, *, key: str, seconds: int, connections: int, script: str | None = None) -> dict:
    # wrk wants at least one connection per thread.
    args = ["wrk", "-t", str(min(2, connections)), "-c", str(connections), "-d", f"{seconds}s", "--latency",
            "-H", f"Authorization: Bearer {key}"]
    if script:
        args += ["-s", script]
    output = subprocess.run(args + [f"http://127.0.0.1:{PORT}{path}"], capture_output=True, text=True, check=True,
                            env={"RELAY_KEY": key, "PATH": "/usr/bin:/bin"}).stdout
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", output)
    scale = {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    socket_errors = re.search(r"Socket errors: (.*)", output)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
            "p99_ms": float(p99.group(1)) * scale,
            "errors": (int(non_2xx.group(1)) if non_2xx else 0) + (1 if socket_errors else 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--server", choices=["asgi", "wsgi"], default="asgi",
                        help="asgi: uvicorn workers, as Relay is served (default); wsgi: sync workers, as before")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed: apt-get install wrk")
    fresh_database()
    setup_django()
    from accounts.services import account_create_with_key
    from mailboxes.keys import Caller
    from mailboxes.creation import mailbox_create
    from relay.backends import get_backend

    owner, key = account_create_with_key(login="bench", plan="enterprise")  # 100,000 active mailboxes: the POST run makes thousands
    mailbox, _ = mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=None, domain=None, ttl_ms=3_600_000)
    server = (["config.asgi", "-k", "uvicorn_worker.UvicornWorker"] if args.server == "asgi" else ["config.wsgi"])
    web = spawn("gunicorn", [sys.executable, "-m", "gunicorn", *server, "-w", str(args.workers),
                             "-b", f"127.0.0.1:{PORT}", "--access-logfile", "-"], env={"RELAY_LOG_LEVEL": "WARNING"})
    wait_until(lambda: _answers(f"http://127.0.0.1:{PORT}/api/schema/"), 60, "gunicorn")
    load = dict(key=key, seconds=args.seconds, connections=args.connections)
    try:
        wrk("/api/v1/whoami", **{**load, "seconds": 3})  # warm up every worker
        baseline = wrk("/api/v1/whoami", **load)
        get = wrk(f"/api/v1/mailboxes/{mailbox.id}", **load)
        post = wrk("/api/v1/mailboxes", script="bench/wrk_post.lua", **load)
    finally:
        stop(web)
    for name, result in [("whoami", baseline), ("GET mailbox", get), ("POST mailboxes", post)]:
        print(f"{name}: {result['rps']:.0f} req/s, p99 {result['p99_ms']:.1f} ms, errors {result['errors']}")
    figures = (f"gunicorn ({args.server}) -w {args.workers}, wrk -c {args.connections}: GET mailbox {get['rps']:.0f} req/s "
               f"(p99 {get['p99_ms']:.1f} ms) = ratio **{get['rps'] / baseline['rps']:.2f}** to whoami "
               f"{baseline['rps']:.0f} req/s (p99 {baseline['p99_ms']:.1f} ms); POST mailboxes {post['rps']:.0f} req/s "
               f"(p99 {post['p99_ms']:.1f} ms) = ratio {post['rps'] / baseline['rps']:.2f}; errors "
               f"{get['errors'] + post['errors'] + baseline['errors']}")
    record("api", command_line(), figures)


def _answers(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=1).status == 200
    except OSError:
        return False


if __name__ == "__main__":
    main()
