"""MCP waits (docs/agents.md) against the API's own wait, in the same run, on gunicorn with
uvicorn workers, runsmtp, Redis and PostgreSQL.

`--waiters` MCP clients (the official SDK's ClientSession over streamable HTTP) each call
`wait_for_code` on a mailbox of their own; once every wait is held, one mail is sent to
each mailbox over SMTP. The figures are the times from each mail's `250` to its tool
result: handed to the web server by Relay (bench/timed_asgi.py), arrived at the client,
parsed by it. Then the same number of plain `GET …/messages?wait=60` requests, answered
the same way. Also the web processes' memory while the waits are held, per waiter.

The clients of each round run in `--client-processes` processes, at a lower priority
than Relay's (agents are separate programs on other machines; one Python process parsing
200 SDK sessions' answers on the server's cores would measure itself).
Times are CLOCK_MONOTONIC, which every process on the machine shares.

    scripts/bench.sh mcp_wait [--waiters 200] [--client-processes 4] [--rounds 3] [--mail-rate 0] [--plot PNG]
        [--settled] [--cold-clients] [--profile PATH] [--memory-profile]
"""
import argparse
import asyncio
import glob
import json
import multiprocessing
import os
import signal
import smtplib
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.api import PORT, _answers
from bench.common import command_line, cpu_seconds, fresh_database, record, rss_mb, setup_django, spawn, stop, wait_until
from bench.waiting import percentile

SMTP_PORT = 2598
# The clients share the server's two cores, where agents would run elsewhere: they yield
# them to Relay's processes. The SDK's client spends about four times the CPU of a plain
# HTTP client on each answer (0.8-1.0 s against 0.2 s for 200), which on the same cores
# would be counted as the server's latency.
CLIENT_NICENESS = 10


def open_waits(store) -> int:
    return sum(store.zcard(name) for name in store.scan_iter("relay:open-waits:*"))


def send_one_each(addresses: list[str], rate: float = 0) -> dict[str, float]:
    """One mail with a code to each address, `rate` a second (0: as fast as Relay takes
    them); the time.monotonic() of each 250."""
    accepted = {}
    started = time.monotonic()
    with smtplib.SMTP("127.0.0.1", SMTP_PORT, timeout=30) as smtp:
        for i, address in enumerate(addresses):
            if rate:
                time.sleep(max(0.0, started + i / rate - time.monotonic()))
            smtp.sendmail("bench@example.com", [address],
                          f"Subject: Your code\r\n\r\nYour verification code is {200000 + i}.\r\n".encode())
            accepted[address] = time.monotonic()
    return accepted


# --- the clients, in processes of their own -----------------------------------------------------
# Each answer is timed three times: when Relay handed its last byte to the web server
# (bench/timed_asgi.py: Relay's latency), when its response reached the client (the HTTP
# client's response hook, which runs only when the client's event loop gets to it) and when
# the client library handed it over (parsed, validated: the client's own cost added).
def client_library_loaded() -> None:
    """What the SDK's client loads at its first tool result (jsonschema and the metaschemas it
    checks an output schema against), loaded now, as in any host that has had one result:
    otherwise each client process stalls for that first load in the round, and the other
    sessions' answers arriving meanwhile are timed late."""
    from jsonschema.validators import validator_for
    from referencing import Registry

    schema = {"type": "object", "properties": {"code": {"type": "string"}}}
    validator_for(schema).check_schema(schema)
    validator_for(schema)(schema, registry=Registry()).iter_errors({"code": "0"})


def mcp_agents(key: str, mailboxes: list[tuple[str, str]], answers, release) -> None:
    """One SDK session per mailbox, each calling wait_for_code; each result's times to `answers`."""
    os.nice(CLIENT_NICENESS)
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    if not os.environ.get("BENCH_COLD_CLIENTS"):
        client_library_loaded()

    async def agent(mailbox_id: str, address: str) -> None:
        arrived = [0.0]

        async def on_response(response) -> None:
            arrived[0] = time.monotonic()

        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120,
                                      event_hooks={"response": [on_response]}) as http, \
                streamable_http_client(f"http://127.0.0.1:{PORT}/mcp", http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            # As a host does on connecting: the tools and their output schemas, which the
            # client checks each result against. Without it the client asks for them
            # right after its first result, and those lists, the costliest answer the
            # server gives, would queue beside the other sessions' results.
            await session.list_tools()
            result = await session.call_tool("wait_for_code", {"mailbox_id": mailbox_id, "timeout_seconds": 60})
            parsed = time.monotonic()
            assert not result.is_error and result.structured_content["code"], result
            answers.put((address, arrived[0], parsed))
            await asyncio.to_thread(release.wait)  # the session stays open until every result is in

    async def agents() -> None:
        await asyncio.gather(*(agent(mailbox_id, address) for mailbox_id, address in mailboxes))

    asyncio.run(agents())


def api_clients(key: str, mailboxes: list[tuple[str, str]], answers, release) -> None:
    """One held `GET …/messages?wait=60` per mailbox, a thread each; each answer's times to `answers`."""
    os.nice(CLIENT_NICENESS)
    import requests

    def client(mailbox_id: str, address: str) -> None:
        arrived = [0.0]
        response = requests.get(f"http://127.0.0.1:{PORT}/api/v1/mailboxes/{mailbox_id}/messages?wait=60",
                                headers={"Authorization": f"Bearer {key}"}, timeout=120,
                                hooks={"response": lambda *_, **__: arrived.__setitem__(0, time.monotonic())})
        body = response.json()
        parsed = time.monotonic()
        assert response.status_code == 200 and body["results"], response.text
        answers.put((address, arrived[0], parsed))

    threads = [threading.Thread(target=client, args=mailbox) for mailbox in mailboxes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)


def settle(pid: int, *, busy_below: float = 0.05, window: float = 0.25, at_most: float = 15.0) -> float:
    """Wait until the web processes' CPU stays under `busy_below` of one core for `window`
    seconds (every wait set up: its first look done, nothing queued); the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < at_most:
        before = cpu_seconds(pid)
        time.sleep(window)
        if (cpu_seconds(pid) - before) / window < busy_below:
            break
    return time.monotonic() - started


def profile_workers(pid: int, seconds: int, path: str) -> list:
    """py-spy recording each web worker (the children of `pid`) for `seconds`, as collapsed
    stacks at `path`.<worker pid>; the recorders, to wait for."""
    workers = workers_of(pid)
    py_spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return [subprocess.Popen([py_spy, "record", "--pid", str(worker), "--duration", str(seconds), "--rate", "250",
                              "--format", "raw", "--output", f"{path}.{worker}", "--nonblocking"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for worker in workers]


def served_times(path: str, count: int) -> dict[str, float]:
    """When the web processes handed over each of `count` answers, by the address its
    message was sent to (bench/timed_asgi.py's files `path`.<pid>, removed once read)."""
    from mailboxes.models import Message

    def written() -> int:
        return sum(Path(answers).read_text().count("\n") for answers in glob.glob(f"{path}.*"))

    # A worker notes an answer just after handing it over: its client may have it first.
    wait_until(lambda: written() >= count, 10, "Relay's own time of every answer")
    served = {}
    for answers in glob.glob(f"{path}.*"):
        with open(answers) as lines:
            served.update((int(message_id), float(moment)) for message_id, moment in map(str.split, lines))
        os.remove(answers)
    return {address: served[message_id] for message_id, address in
            Message.objects.filter(id__in=served).values_list("id", "mailbox__address")}


def workers_of(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return [int(child) for child in children.read().split()]


def snapshot_workers(pid: int, path: str, which: str) -> dict[str, int]:
    """Have each web worker take its first or second tracemalloc snapshot
    (bench/timed_asgi.py) and wait for it; after the second, the bytes held since the first
    by library, summed over the workers."""
    workers = workers_of(pid)
    for worker in workers:
        os.kill(worker, signal.SIGUSR1)
    files = [f"{path}.{worker}" + (".first" if which == "first" else "") for worker in workers]
    wait_until(lambda: all(os.path.exists(name) for name in files), 120, f"the web workers' {which} snapshots")
    held: dict[str, int] = {}
    for name in files:
        if which == "second":
            with open(name) as figures:
                for library, size in json.load(figures).items():
                    held[library] = held.get(library, 0) + size
        os.remove(name)
    return held


def run_round(clients, key: str, mailboxes: list, processes: int, store, web, mail_rate: float,
              settled: bool = False, profile: str = "", answers_path: str = "", memory_path: str = "") -> dict:
    """Start `clients` over `processes` processes, wait until every wait is held, mail each
    mailbox once, collect the answers: their latencies from the 250 (served, arrived,
    parsed), and the web processes' growth per held wait."""
    context = multiprocessing.get_context("spawn")
    answers, release = context.Queue(), context.Event()
    pairs = [(str(mailbox.id), mailbox.address) for mailbox in mailboxes]
    before = rss_mb(web.pid)
    if memory_path:
        snapshot_workers(web.pid, memory_path, "first")
    workers = [context.Process(target=clients, args=(key, pairs[i::processes], answers, release))
               for i in range(processes)]
    for worker in workers:
        worker.start()
    wait_until(lambda: open_waits(store) >= len(mailboxes), 120, f"every wait of {clients.__name__} held")
    if settled:
        print(f"{clients.__name__}: the web processes went quiet {settle(web.pid):.2f} s after the last wait was held")
    during = rss_mb(web.pid)
    held = snapshot_workers(web.pid, memory_path, "second") if memory_path else {}
    recorders = profile_workers(web.pid, 2, f"{profile}-{clients.__name__}") if profile else []
    if recorders:
        time.sleep(0.3)  # py-spy attached before the first mail
    accepted = send_one_each([address for _, address in pairs], mail_rate)
    done = {address: (arrived, parsed) for address, arrived, parsed in (answers.get(timeout=60) for _ in pairs)}
    release.set()
    for recorder in recorders:
        recorder.wait(60)
    for worker in workers:
        worker.join(60)
        if worker.exitcode != 0:
            raise SystemExit(f"a client process of {clients.__name__} failed (exit code {worker.exitcode})")
    first = min(accepted.values())
    served = served_times(answers_path, len(pairs))
    return {"served": [served[address] - accepted[address] for address in accepted],
            "arrived": [done[address][0] - accepted[address] for address in accepted],
            "parsed": [done[address][1] - accepted[address] for address in accepted],
            "sent": [accepted[address] - first for address in accepted],
            "held": {library: size / len(mailboxes) for library, size in held.items()},
            "memory": (during - before) / len(mailboxes)}


def plot(rounds: dict, path: str, title: str) -> None:
    """Each answer's latency (arrival at its client) against when its mail was accepted,
    MCP and API, every round: the PNG docs/benchmarks.md and the README show."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4), dpi=110)
    for name, colour in (("API", "#1f77b4"), ("MCP", "#d62728")):
        for index, done in enumerate(rounds[name]):
            axes.scatter(done["sent"], [value * 1000 for value in done["arrived"]], s=6, alpha=0.6, color=colour,
                         label=f"{name} wait" if index == 0 else None)
    axes.set_yscale("log")
    axes.set_xlabel("seconds since the round's first mail was accepted")
    axes.set_ylabel("ms from the mail's 250 to the answer")
    axes.set_title(title, fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", type=int, default=200)
    parser.add_argument("--client-processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="MCP and API rounds, interleaved")
    parser.add_argument("--mail-rate", type=float, default=0,
                        help="mails a second to the waiting mailboxes (0: as fast as Relay takes them)")
    parser.add_argument("--plot", default="", help="write a PNG of every answer's latency over the run here")
    parser.add_argument("--settled", action="store_true",
                        help="send the mails only once the web processes are idle (every wait set up), not as soon "
                             "as the last wait holds its place")
    parser.add_argument("--profile", default="",
                        help="record each web worker with py-spy over a round's first 2 s of mail, as collapsed "
                             "stacks at PROFILE-<clients>.<pid>")
    parser.add_argument("--memory-profile", action="store_true",
                        help="the web workers trace their allocations (slower): print which library holds the memory "
                             "each held wait takes")
    parser.add_argument("--cold-clients", action="store_true",
                        help="leave the SDK client's first-result load to the round (as round four measured)")
    args = parser.parse_args()
    if args.cold_clients:
        os.environ["BENCH_COLD_CLIENTS"] = "1"  # read by the client processes
    fresh_database()
    setup_django()
    import redis
    from django.conf import settings

    from accounts.services import account_create_with_key
    from mailboxes.lifecycle import mailbox_create
    from accounts.identity import Caller
    from relay.backends import get_backend

    owner, key = account_create_with_key(login="bench", plan="enterprise")

    def mailboxes() -> list:
        return [mailbox_create(backend=get_backend(), caller=Caller(owner=owner), local_part=None, domain=None,
                               ttl_ms=3_600_000)[0] for _ in range(args.waiters)]

    store = redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL)
    scratch = tempfile.mkdtemp(prefix="relay-mcp-wait-")
    answers_path = os.path.join(scratch, "answers")
    memory_path = os.path.join(scratch, "memory") if args.memory_profile else ""
    env = {"RELAY_LOG_LEVEL": "WARNING", "RELAY_MAX_OPEN_WAITS": "10000", "BENCH_ANSWERS": answers_path,
           "BENCH_MEMORY": memory_path}
    web = spawn("web-mcp", [sys.executable, "-m", "gunicorn", "bench.timed_asgi", "-k", "core.serving.UvicornWorker",
                            "-w", "2", "-b", f"127.0.0.1:{PORT}", "--timeout", "120"], env=env)
    smtp = spawn("smtp-mcp", [sys.executable, "manage.py", "runsmtp", "--port", str(SMTP_PORT)], env=env,
                 ready="Relay SMTP on")
    wait_until(lambda: _answers(f"http://127.0.0.1:{PORT}/api/schema/"), 180, "the ASGI server")
    rounds = {"MCP": [], "API": []}
    try:
        for _ in range(args.rounds):
            for name, clients in (("MCP", mcp_agents), ("API", api_clients)):
                rounds[name].append(run_round(clients, key, mailboxes(), args.client_processes, store, web,
                                                 args.mail_rate, args.settled, args.profile, answers_path,
                                                 memory_path))
    finally:
        stop(web, smtp)
    ms = lambda values, p: percentile(values, p) * 1000  # noqa: E731
    middle = lambda values: sorted(values)[len(values) // 2]  # noqa: E731
    spread = lambda values: f"{min(values):.0f}–{max(values):.0f}"  # noqa: E731

    def figure(name: str, timing: str, p: float) -> str:
        values = [ms(done[timing], p) for done in rounds[name]]
        return f"{middle(values):.0f} ms ({spread(values)})"

    def ratio(timing: str) -> str:
        values = [ms(mcp[timing], 0.99) / ms(api[timing], 0.99) for mcp, api in zip(rounds["MCP"], rounds["API"])]
        return f"**{middle(values):.2f}** ({min(values):.2f}–{max(values):.2f})"

    memory = {name: sum(done["memory"] for done in done_rounds) / len(done_rounds) * 1024
              for name, done_rounds in rounds.items()}
    paced = (f" sent at {args.mail_rate:g}/s" if args.mail_rate else "") + (
        " once the web processes were idle" if args.settled else "")
    figures = (f"{args.waiters} concurrent waits, clients in {args.client_processes} processes, each answered by one "
               f"mail{paced}; {args.rounds} interleaved rounds (median, range). From the SMTP 250 to the answer "
               f"handed to the web server by Relay: MCP wait_for_code p50 {figure('MCP', 'served', 0.5)}, p99 "
               f"**{figure('MCP', 'served', 0.99)}**; API wait p50 {figure('API', 'served', 0.5)}, p99 "
               f"{figure('API', 'served', 0.99)}; p99 ratio per round {ratio('served')}. To the answer's arrival at "
               f"the client: MCP p50 {figure('MCP', 'arrived', 0.5)}, p99 "
               f"**{figure('MCP', 'arrived', 0.99)}**; API wait p50 {figure('API', 'arrived', 0.5)}, p99 "
               f"{figure('API', 'arrived', 0.99)}; p99 ratio per round {ratio('arrived')}. Parsed by the client "
               f"library: MCP p99 {figure('MCP', 'parsed', 0.99)}, API p99 {figure('API', 'parsed', 0.99)}, ratio "
               f"{ratio('parsed')}. Web RSS per held wait: MCP {memory['MCP']:.0f} KiB, API {memory['API']:.0f} KiB")
    if args.memory_profile:
        for name, done_rounds in rounds.items():
            libraries = {library for done in done_rounds for library in done["held"]}
            held = {library: sum(done["held"].get(library, 0) for done in done_rounds) / len(done_rounds) / 1024
                    for library in libraries}
            figures += (f". Held per {name} wait, traced, by the library that allocated it: " + ", ".join(
                f"{library} {size:.1f}" for library, size in sorted(held.items(), key=lambda item: -item[1]))
                        + f" KiB (sum {sum(held.values()):.1f})")
    record("mcp_wait", command_line(), figures)
    if args.plot:
        plot(rounds, args.plot, f"{args.waiters} waits, mails{paced or ' all at once'}: MCP wait_for_code and the "
                                f"API's wait, {args.rounds} rounds each")


if __name__ == "__main__":
    main()
