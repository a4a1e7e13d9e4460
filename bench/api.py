"""API: gunicorn (uvicorn workers, or sync ones with --server wsgi) on this machine, load from wrk in another process. Prints requests/s
and p99 latency of GET /api/v1/mailboxes/{id} and POST /api/v1/mailboxes, and their
ratio to a bare Django view making the same primary-key select (bench/baseline_asgi.py),
served by the same server and workers; and GET /api/v1/mailboxes/{id} with an OAuth
access token instead of the API key, with its ratio to the key's. They alternate for
`--rounds` rounds, and the ratios are given per round (median and range).

    scripts/bench.sh api [--seconds 10] [--connections 16] [--workers 2] [--rounds 3] [--server asgi|wsgi]
"""
import argparse
import re
import shutil
import subprocess
import sys
import urllib.request

from bench.common import command_line, fresh_database, record, setup_django, spawn, stop, wait_until

PORT = 8765


def wrk(path: str, *, key: str, seconds: int, connections: int, script: str | None = None, port: int = PORT) -> dict:
    """wrk against `path` on the local server at `port`: req/s, requests, p99 ms, errors."""
    # wrk wants at least one connection per thread.
    args = ["wrk", "-t", str(min(2, connections)), "-c", str(connections), "-d", f"{seconds}s", "--latency",
            "-H", f"Authorization: Bearer {key}"]
    if script:
        args += ["-s", script]
    output = subprocess.run(args + [f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, check=True,
                            env={"RELAY_KEY": key, "PATH": "/usr/bin:/bin"}).stdout
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", output)
    scale = {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    socket_errors = re.search(r"Socket errors: (.*)", output)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
            "requests": int(re.search(r"(\d+) requests in", output).group(1)),
            "p99_ms": float(p99.group(1)) * scale,
            "errors": (int(non_2xx.group(1)) if non_2xx else 0) + (1 if socket_errors else 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the baseline and the routes")
    parser.add_argument("--server", choices=["asgi", "wsgi"], default="asgi",
                        help="asgi: uvicorn workers, as Relay is served (default); wsgi: sync workers, as before")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed: apt-get install wrk")
    fresh_database()
    setup_django()
    from accounts.services import account_create_with_key
    from accounts.identity import Caller
    from mailboxes.lifecycle import mailbox_create
    from relay.backends import get_backend

    owner, key = account_create_with_key(login="bench", plan="enterprise")  # 100,000 active mailboxes: the POST run makes thousands
    mailbox, _ = mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=None, domain=None, ttl_ms=3_600_000)
    token = access_token(owner)
    # Relay's application with the baseline's route added (bench/baseline_asgi.py), so both
    # are served by the same server and the same workers.
    server = (["bench.baseline_asgi", "-k", "core.serving.UvicornWorker"] if args.server == "asgi"
              else ["bench.baseline_wsgi"])
    web = spawn("gunicorn", [sys.executable, "-m", "gunicorn", *server, "-w", str(args.workers),
                             "-b", f"127.0.0.1:{PORT}", "--access-logfile", "-"], env={"RELAY_LOG_LEVEL": "WARNING"})
    wait_until(lambda: _answers(f"http://127.0.0.1:{PORT}/api/schema/"), 60, "gunicorn")
    load = dict(key=key, seconds=args.seconds, connections=args.connections)
    baseline_path = f"/baseline/mailboxes/{mailbox.id}"
    rounds: dict[str, list[dict]] = {"baseline": [], "GET mailbox": [], "GET mailbox (token)": [], "POST mailboxes": []}
    try:
        wrk(baseline_path, **{**load, "seconds": 3})  # warm up every worker
        wrk(f"/api/v1/mailboxes/{mailbox.id}", **{**load, "seconds": 3})
        for _ in range(args.rounds):
            rounds["baseline"].append(wrk(baseline_path, **load))
            rounds["GET mailbox"].append(wrk(f"/api/v1/mailboxes/{mailbox.id}", **load))
            rounds["GET mailbox (token)"].append(wrk(f"/api/v1/mailboxes/{mailbox.id}", **{**load, "key": token}))
            rounds["POST mailboxes"].append(wrk("/api/v1/mailboxes", script="bench/wrk_post.lua", **load))
    finally:
        stop(web)
    for name, results in rounds.items():
        for result in results:
            print(f"{name}: {result['rps']:.0f} req/s, p99 {result['p99_ms']:.1f} ms, errors {result['errors']}")

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    def summary(name: str) -> str:
        rps = [result["rps"] for result in rounds[name]]
        return f"{median(rps):.0f} req/s ({min(rps):.0f}–{max(rps):.0f})"

    def ratio(name: str, to: str = "baseline") -> str:
        values = sorted(route["rps"] / base["rps"] for route, base in zip(rounds[name], rounds[to]))
        return f"**{median(values):.2f}** ({values[0]:.2f}–{values[-1]:.2f})"

    errors = sum(result["errors"] for results in rounds.values() for result in results)
    figures = (f"gunicorn ({args.server}) -w {args.workers}, wrk -c {args.connections}, {args.rounds} interleaved "
               f"rounds of {args.seconds} s (median, range): GET mailbox {summary('GET mailbox')} = ratio "
               f"{ratio('GET mailbox')} to the bare Django view's same select {summary('baseline')}; with an OAuth "
               f"access token {summary('GET mailbox (token)')} = ratio {ratio('GET mailbox (token)', 'GET mailbox')} "
               f"to the API key's; POST mailboxes "
               f"{summary('POST mailboxes')} = ratio {ratio('POST mailboxes')}; errors {errors}")
    record("api", command_line(), figures)


def access_token(owner) -> str:
    """An OAuth access token of `owner`'s for the API (what a hosted agent holds after consent)."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone
    from oauth2_provider.models import get_access_token_model, get_application_model

    from accounts.oauth import oauth_user_for

    user = oauth_user_for(owner)
    application = get_application_model().objects.create(
        name="bench agent", client_type="public", authorization_grant_type="authorization-code",
        redirect_uris="http://127.0.0.1:9/callback", user=user)
    secret = "bench-access-token-" + "x" * 24
    get_access_token_model().objects.create(user=user, application=application, token=secret, scope="mailboxes",
                                            expires=timezone.now() + timedelta(hours=2),
                                            resource=[settings.RELAY_API_RESOURCE])
    return secret


def _answers(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=1).status == 200
    except OSError:
        return False


if __name__ == "__main__":
    main()
