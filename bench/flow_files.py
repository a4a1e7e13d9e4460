"""Which of Relay's files four flows cross (docs/architecture.md, "The flows"): SMTP in, an
expiry, MCP's wait_for_code and a reply sent, each run once in this process through its
real door (an SMTP socket, beat's sweep task, POST /mcp and POST …/reply on the ASGI
application), with a profiler noting every file of the apps whose code runs.

A task that would go to the broker runs here instead, so a flow's workers count too.
Prints, per flow, the files in the order first entered, how often the flow goes back to an
app it had left, and its calls back up: code of an app calling code of an app above it in
the layers (by a signal, a commit hook or a function handed down), which an import never
shows. `scripts/bench.sh flow_files`."""
import asyncio
import json
import smtplib
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path

from bench.common import ROOT, fresh_database

APPS = ("accounts", "api", "checks", "config", "core", "domains", "inbox", "expiry", "mailboxes", "owed", "relay",
        "webhooks")
# The layers of .importlinter, top first: a call from an app's code into an app above it
# (a signal, a commit hook, a function handed down) is a call back up.
LAYERS = (("config",), ("inbox", "api"), ("checks",), ("expiry", "webhooks"), ("relay",), ("mailboxes",),
          ("domains",), ("accounts",), ("owed",), ("core",))
LEVEL = {app: level for level, apps in enumerate(LAYERS) for app in apps}
# Where a task run here starts, as if on a worker: the walk down a stack stops there.
WORKER_STARTS: set = set()


def _app_file(frame) -> str | None:
    """The frame's file, relative to the checkout, if it is an app's (migrations aside)."""
    path = frame.f_code.co_filename
    if not path.startswith(str(ROOT)):
        return None
    relative = Path(path).relative_to(ROOT).as_posix()
    return relative if relative.split("/")[0] in APPS and "/migrations/" not in relative else None


class Crossed:
    """The app files entered during one flow, in every thread (the profiler is installed
    before any thread starts, and records only while a flow is on)."""

    current: "Crossed | None" = None
    last_exit = float("-inf")

    def __init__(self) -> None:
        self.files: OrderedDict[str, None] = OrderedDict()
        # (the nearest app file below on the stack, the file called) for each call back up
        self.up: OrderedDict[tuple[str, str], None] = OrderedDict()

    @staticmethod
    def install() -> None:
        threading.setprofile(Crossed._profile)
        sys.setprofile(Crossed._profile)

    @staticmethod
    def _profile(frame, event, arg):
        crossed = Crossed.current
        if crossed is None or event != "call":
            return
        relative = _app_file(frame)
        if relative is None:
            return
        crossed.files.setdefault(relative, None)
        caller = frame.f_back
        while caller is not None and caller.f_code not in WORKER_STARTS and (below := _app_file(caller)) is None:
            caller = caller.f_back
        if caller is not None and caller.f_code in WORKER_STARTS:
            return
        if caller is not None and LEVEL[below.split("/")[0]] > LEVEL[relative.split("/")[0]]:
            crossed.up.setdefault((below, relative), None)

    def __enter__(self) -> "Crossed":
        from relay import ingest
        # Each flow that stores a message asks for its words' task: relay.ingest asks at
        # most once per WORDS_DELAY_SECONDS, so an earlier flow's ask must have lapsed.
        time.sleep(max(0.0, Crossed.last_exit + ingest.WORDS_DELAY_SECONDS - time.monotonic()))
        self.threads_before = set(threading.enumerate())
        Crossed.current = self
        return self

    def __exit__(self, *exc) -> None:
        # The task a flow queues from a thread of its own (relay.ingest's owed words) is
        # the flow's too, and must not be counted in the next one.
        for thread in set(threading.enumerate()) - self.threads_before:
            if thread.name == "smtp-words":
                thread.join(timeout=10)
        Crossed.current = None
        Crossed.last_exit = time.monotonic()

    def returns(self) -> int:
        """How many times the flow enters an app it had left (first entries, in order)."""
        seen, last, count = set(), None, 0
        for path in self.files:
            app = path.split("/")[0]
            if app != last:
                count += app in seen
                seen.add(app)
                last = app
        return count


def run_tasks_here() -> None:
    """A task sent by name runs in this process, as a worker would run it: on a stack of its
    own as far as calls back up go (a worker's task is called by Celery, not by its sender)."""
    from celery import current_app
    from celery.app.task import Task

    apply = Task.apply

    def on_a_worker(task, *args, **kwargs):
        return apply(task, *args, **kwargs)

    def send_task(name, args=(), kwargs=None, **options):
        return current_app.tasks[name].apply(args=args, kwargs=kwargs or {})

    WORKER_STARTS.add(on_a_worker.__code__)
    Task.apply = on_a_worker
    current_app.loader.import_default_modules()
    current_app.send_task = send_task
    current_app.conf.task_always_eager = True


async def lifespan(application):
    """Start the ASGI application's lifespan (the MCP session manager) and return its
    shutdown."""
    inbox, started = asyncio.Queue(), asyncio.Event()
    await inbox.put({"type": "lifespan.startup"})

    async def send(message):
        if message["type"] == "lifespan.startup.complete":
            started.set()

    task = asyncio.ensure_future(application({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, send))
    await started.wait()

    async def stop():
        await inbox.put({"type": "lifespan.shutdown"})
        await task

    return stop


def main() -> None:
    Crossed.install()
    fresh_database()
    run_tasks_here()
    from django.utils import timezone

    from accounts.services import account_create_with_key
    from config.asgi import application
    from mailboxes.models import Mailbox, Message
    from tests.conftest import SmtpServerThread

    _, key = account_create_with_key(login="flows", plan="pro")
    headers = {"Authorization": f"Bearer {key}"}
    flows: dict[str, Crossed] = {}

    async def http(method: str, path: str, json_body: dict, extra: dict | None = None) -> tuple[int, str]:
        """One request to the ASGI application, as the web server hands it over."""
        body = json.dumps(json_body).encode()
        sent_headers = {**headers, "Content-Type": "application/json", "Host": "127.0.0.1:8000",
                        "Content-Length": str(len(body)), **(extra or {})}
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000),
                 "headers": [(name.lower().encode(), value.encode()) for name, value in sent_headers.items()]}
        messages, answered = [{"type": "http.request", "body": body, "more_body": False}], asyncio.Event()
        status, chunks = [0], []

        async def receive():
            if messages:
                return messages.pop()
            await answered.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    answered.set()

        await application(scope, receive, send)
        return status[0], b"".join(chunks).decode()

    async def flows_over_http() -> None:
        stop = await lifespan(application)
        box = json.loads((await http("POST", "/api/v1/mailboxes", {"local_part": "flows", "ttl_ms": 600_000}))[1])
        server = await asyncio.to_thread(SmtpServerThread().start)
        mail = (f"From: Bob <bob@example.com>\r\nTo: {box['address']}\r\nSubject: Your code\r\n"
                "Message-ID: <first@example.com>\r\n\r\nYour verification code is 482913.\r\n").encode()
        with Crossed() as flows["SMTP in"]:
            with smtplib.SMTP("127.0.0.1", server.port, timeout=10) as smtp:
                smtp.sendmail("bob@example.com", [box["address"]], mail)
        await asyncio.to_thread(server.stop)

        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "wait_for_code", "arguments": {"mailbox_id": box["id"], "timeout_seconds": 5}}}
        with Crossed() as flows["MCP wait_for_code"]:
            _, answer = await http("POST", "/mcp", call, {"Accept": "application/json, text/event-stream",
                                                          "MCP-Protocol-Version": "2025-11-25"})
        assert "482913" in answer, answer
        # The wait's subscription ends once nobody waits (at its next read, within a
        # second): it is the MCP flow's tail, and must not be counted in the reply's.
        from relay.live import hub
        if hub.listener is not None:
            await asyncio.wait_for(hub.listener, timeout=10)

        message_id = await asyncio.to_thread(lambda: Message.objects.get(mailbox_id=box["id"]).id)
        with Crossed() as flows["a reply sent"]:
            status, text = await http("POST", f"/api/v1/mailboxes/{box['id']}/messages/{message_id}/reply",
                                      {"text": "Confirmed."})
            assert status == 202, text
            from relay.outbox.send import Mailer
            await asyncio.to_thread(lambda: Mailer().dispatch(reason="the flow"))
        await stop()

    asyncio.run(flows_over_http())

    from celery import current_app
    ending = Mailbox.objects.create(address="ending@relay.localhost", expires_at=timezone.now())
    time.sleep(0.01)
    with Crossed() as flows["expiry"]:
        current_app.tasks["expiry.tasks.sweep"].apply()
    ending.refresh_from_db()
    assert ending.cleanup_state == "done", ending.cleanup_state

    report = {name: {"files": len(crossed.files), "back to an app left": crossed.returns(),
                     "calls back up": [f"{below} -> {above}" for below, above in crossed.up],
                     "crossed": list(crossed.files)} for name, crossed in flows.items()}
    print(json.dumps(report, indent=1))
    for name, found in report.items():
        print(f"{name}: {found['files']} files, back to an app it had left {found['back to an app left']} times, "
              f"{len(found['calls back up'])} calls back up")


if __name__ == "__main__":
    main()
