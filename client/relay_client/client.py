"""The client: one method per thing Relay does, named as Relay's MCP tools and taking the
same arguments."""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import time
from dataclasses import dataclass
from collections.abc import Iterator, Mapping
from typing import Any

import requests

from relay_client.types import Delivery, Domain, Event, Mailbox, Message, Sent, Thread, build

WAIT_CHUNK_SECONDS = 60  # the API holds one wait for at most this long
# A recipient's states that nothing but a later bounce or complaint changes (docs/delivery.md).
FINAL_DELIVERY = frozenset({"sent", "failed", "bounced", "complained"})
MINUTE_MS = 60_000
MAX_RETRY_AFTER_SECONDS = 60.0


class RelayError(Exception):
    """An error answer of the API: `.code` is the API's (`not_found`, `expired`,
    `quota_exceeded`, …), `.status` the HTTP status, `.fields` the bad fields, if any."""

    def __init__(self, code: str, message: str, status: int, fields: dict[str, Any] | None = None) -> None:
        self.code, self.message, self.status, self.fields = code, message, status, fields or {}
        # The reason of each bad field is part of the text: it is what a reader needs.
        reasons = "; ".join(f"{name}: {' '.join(map(str, problems)) if isinstance(problems, list) else problems}"
                            for name, problems in self.fields.items())
        super().__init__(f"{code}: {message}" + (f" ({reasons})" if reasons else ""))


class WaitTimeout(TimeoutError):
    """A wait ran out before what it waited for arrived."""


@dataclass(frozen=True)
class DeliveryReport:
    """What wait_for_delivery answers: each recipient's state, and whether all are final."""

    delivery: list[Delivery]
    final: bool


class Sandbox:
    """A sandbox (Relay's docs/sandbox.md): its mailbox and the SMTP settings an app submits
    with, the password among them (shown once, when it was made or rotated)."""

    def __init__(self, mailbox: Mailbox, relay: Relay | None = None) -> None:
        if not mailbox.smtp:
            raise ValueError("This mailbox came without SMTP settings: it is not a sandbox just made.")
        self.mailbox, self.smtp = mailbox, dict(mailbox.smtp)
        self.id, self.address = mailbox.id, mailbox.address
        self._relay = relay

    def release(self, message_id: int, to: list[str]) -> Sent:
        """Send a message this sandbox caught on to `to` alone: Relay.release_message."""
        if self._relay is None:
            raise ValueError("This Sandbox was made without a client: use Relay.release_message(sandbox.id, …).")
        return self._relay.release_message(self.id, message_id, to)

    def django_settings(self, *, use_tls: bool | None = None) -> dict[str, Any]:
        """Django's EMAIL_* settings for this sandbox: `settings.configure(**…)` or
        `override_settings(**…)`. `use_tls`: STARTTLS, as the settings say unless given
        (False for a Relay without a certificate, which takes AUTH on loopback only)."""
        return {"EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend", "EMAIL_HOST": self.smtp["host"],
                "EMAIL_PORT": self.smtp["port"], "EMAIL_HOST_USER": self.smtp["username"],
                "EMAIL_HOST_PASSWORD": self.smtp["password"],
                "EMAIL_USE_TLS": self.smtp["security"] == "starttls" if use_tls is None else use_tls,
                "EMAIL_USE_SSL": False}

    def __repr__(self) -> str:
        return f"<Sandbox {self.address}>"


class Relay:
    """Relay's API. `base_url` and `api_key` default to RELAY_URL and RELAY_API_KEY.
    `retries`: how many times a 429 or 503 is retried, after its Retry-After."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, session: requests.Session | None = None) -> None:
        base_url = base_url or os.environ.get("RELAY_URL", "")
        api_key = api_key or os.environ.get("RELAY_API_KEY", "")
        if not base_url:
            raise ValueError("Give Relay's URL: Relay(base_url=…) or RELAY_URL.")
        base_url = base_url.rstrip("/")
        self.api_url = base_url if base_url.endswith("/api/v1") else base_url + "/api/v1"
        self.timeout, self.retries = timeout, retries
        self.session = session or requests.Session()
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"

    # --- plumbing ---------------------------------------------------------------------------
    def _request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                 json: Any = None, timeout: float | None = None, stream: bool = False,
                 headers: Mapping[str, str] | None = None) -> requests.Response:
        params = {key: (str(value).lower() if isinstance(value, bool) else value)
                  for key, value in (params or {}).items() if value is not None}
        for attempt in range(self.retries + 1):
            response = self.session.request(method, self.api_url + path, params=params, json=json,
                                            timeout=(10, timeout or self.timeout), stream=stream, headers=headers)
            if response.status_code in (429, 503) and attempt < self.retries:
                time.sleep(_retry_after(response))
                continue
            if response.status_code >= 400:
                raise _error(response)
            return response
        raise AssertionError("unreachable")

    def _json(self, method: str, path: str, **kwargs) -> Any:
        response = self._request(method, path, **kwargs)
        return response.json() if response.content else None

    # --- mailboxes ----------------------------------------------------------------------------
    def create_mailbox(self, ttl_minutes: int | None = None, local_part: str | None = None, name: str | None = None,
                       tags: list[str] | None = None, domain: str | None = None) -> Mailbox:
        body = {"ttl_ms": ttl_minutes * 60_000 if ttl_minutes is not None else None, "local_part": local_part,
                "name": name, "tags": tags, "domain": domain}
        with _in_minutes():
            return build(Mailbox, self._json("POST", "/mailboxes",
                                             json={k: v for k, v in body.items() if v is not None}))

    def list_mailboxes(self, include_expired: bool = False) -> list[Mailbox]:
        mailboxes, page = [], 1
        while True:
            answer = self._json("GET", "/mailboxes", params={"include_expired": include_expired, "page": page,
                                                             "page_size": 200})
            mailboxes += [build(Mailbox, item) for item in answer["results"]]
            if not answer.get("next"):
                return mailboxes
            page += 1

    def get_mailbox(self, mailbox_id: str) -> Mailbox:
        return build(Mailbox, self._json("GET", f"/mailboxes/{mailbox_id}"))

    def renew_mailbox(self, mailbox_id: str, ttl_minutes: int | None = None) -> Mailbox:
        body = {"ttl_ms": ttl_minutes * 60_000} if ttl_minutes is not None else {}
        with _in_minutes():
            return build(Mailbox, self._json("POST", f"/mailboxes/{mailbox_id}/renew", json=body))

    def create_sandbox(self, ttl_minutes: int | None = None, local_part: str | None = None) -> Sandbox:
        """A sandbox: a mailbox that also catches every mail an app submits with its SMTP
        settings (`.smtp`, `.django_settings()`), to anyone, delivering none."""
        body = {"ttl_ms": ttl_minutes * 60_000 if ttl_minutes is not None else None, "local_part": local_part,
                "sandbox": True}
        return Sandbox(build(Mailbox, self._json("POST", "/mailboxes",
                                                 json={k: v for k, v in body.items() if v is not None})), self)

    def set_faults(self, mailbox_id: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Replace a sandbox's fault rules; returns them, each with `remaining`."""
        return self._json("PUT", f"/mailboxes/{mailbox_id}/faults", json={"rules": rules})["rules"]

    def delete_mailbox(self, mailbox_id: str) -> bool:
        self._request("DELETE", f"/mailboxes/{mailbox_id}")
        return True

    # --- messages -------------------------------------------------------------------------------
    def list_messages(self, mailbox_id: str, query: str | None = None, unread: bool = False,
                      authenticated: bool = False, direction: str | None = None,
                      rcpt: str | None = None) -> list[Message]:
        """The newest messages, received and sent (`direction`: "in" or "out" for one kind);
        `rcpt`: only mail to that envelope recipient (a sandbox's catch: any of its RCPT TO,
        a Bcc included)."""
        answer = self._json("GET", f"/mailboxes/{mailbox_id}/messages",
                            params={"q": query, "unread": True if unread else None,
                                    "authenticated": True if authenticated else None, "direction": direction,
                                    "rcpt": rcpt})
        return [Message.from_api(item) for item in answer["results"]]

    def get_message(self, mailbox_id: str, message_id: int) -> Message:
        return Message.from_api(self._json("GET", f"/mailboxes/{mailbox_id}/messages/{message_id}"))

    def get_raw(self, mailbox_id: str, message_id: int) -> bytes:
        return self._request("GET", f"/mailboxes/{mailbox_id}/messages/{message_id}/raw").content

    def get_attachment(self, mailbox_id: str, message_id: int, attachment_id: int) -> bytes:
        return self._request("GET", f"/mailboxes/{mailbox_id}/messages/{message_id}/attachments/{attachment_id}").content

    def check_message(self, mailbox_id: str, message_id: int, checks: list[str] | None = None,
                      links_timeout_seconds: float = 30) -> dict[str, Any]:
        """Relay's checks of a message, as the API answers them, by name ("html", "links",
        "spam", "headers"; all four when `checks` is None). A links check is started and
        polled until done or `links_timeout_seconds` pass (then its status is "pending").
        A check that cannot run there is {"error": "not_configured: …"} or the like."""
        base = f"/mailboxes/{mailbox_id}/messages/{message_id}/checks"
        found: dict[str, Any] = {}
        for kind in checks or ("html", "links", "spam", "headers"):
            try:
                if kind == "links":
                    found[kind] = self._json("POST", f"{base}/links")
                    deadline = time.monotonic() + links_timeout_seconds
                    while found[kind]["status"] != "done" and time.monotonic() < deadline:
                        time.sleep(0.25)
                        found[kind] = self._json("GET", f"{base}/links")
                else:
                    found[kind] = self._json("GET", f"{base}/{kind}")
            except RelayError as exc:
                if exc.code in ("not_found", "expired", "unauthorized", "forbidden"):
                    raise
                found[kind] = {"error": f"{exc.code}: {exc.message}"}
        return found

    def _first_after(self, mailbox_id: str, *, wait: int, after: int | None, from_: str | None,
                     subject: str | None, authenticated: bool = False, rcpt: str | None = None) -> int | None:
        """The oldest message after `after` that matches, held up to `wait` seconds."""
        params = {"after": after, "from": from_, "subject": subject, "page_size": 1, "direction": "in",
                  "authenticated": True if authenticated else None, "rcpt": rcpt}
        answer = self._json("GET", f"/mailboxes/{mailbox_id}/messages", params={**params, "wait": wait},
                            timeout=wait + self.timeout)
        if not answer["results"]:
            return None
        if answer["count"] > 1:  # newest first: the oldest is on the last page
            answer = self._json("GET", f"/mailboxes/{mailbox_id}/messages", params={**params, "page": answer["count"]})
        return answer["results"][0]["id"]

    def wait_for_message(self, mailbox_id: str, timeout_seconds: float = 30, from_: str | None = None,
                         subject: str | None = None, after: int | None = None,
                         authenticated: bool = False, rcpt: str | None = None) -> Message | None:
        """The first message matching the filters received after `after` (one already
        there counts), as soon as it arrives; None if none came in time. `authenticated`:
        only mail whose verdict is pass (a forged sender is passed over); `rcpt`: only mail
        to that envelope recipient."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            wait = min(WAIT_CHUNK_SECONDS, max(0, round(deadline - time.monotonic())))
            found = self._first_after(mailbox_id, wait=wait, after=after, from_=from_, subject=subject,
                                      authenticated=authenticated, rcpt=rcpt)
            if found is not None:
                return self.get_message(mailbox_id, found)
            if time.monotonic() >= deadline - 0.5:
                return None

    def wait_for_code(self, mailbox_id: str, timeout_seconds: float = 30, from_: str | None = None,
                      subject: str | None = None, after: int | None = None, authenticated: bool = False,
                      rcpt: str | None = None) -> str:
        """The most likely code of the first matching message that has one (messages
        without a code are passed over). Raises WaitTimeout if none came in time."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            left = max(0.0, deadline - time.monotonic())
            message = self.wait_for_message(mailbox_id, left, from_=from_, subject=subject, after=after,
                                            authenticated=authenticated, rcpt=rcpt)
            if message is None:
                break
            if message.codes:
                return message.codes[0]
            after = message.id
            if time.monotonic() >= deadline:
                break
        filters = ", ".join(f"{name} {value!r}" for name, value in (("from", from_), ("subject", subject),
                                                                     ("to", rcpt), ("after message", after)) if value)
        raise WaitTimeout(f"no message with a code arrived in mailbox {mailbox_id} within {timeout_seconds:g} s"
                          + (f" ({filters})" if filters else ""))

    def send_message(self, mailbox_id: str, to: list[str], subject: str, text: str, *, html: str | None = None,
                     cc: list[str] | None = None, bcc: list[str] | None = None, reply_to: str | None = None,
                     attachments: list[tuple[str, str, bytes]] | None = None) -> Sent:
        """Send from the mailbox; `attachments`: (filename, content type, bytes) each. Bcc
        recipients are in no header sent."""
        body = {"to": to, "subject": subject, "text": text, "html": html, "cc": cc, "bcc": bcc, "reply_to": reply_to,
                "attachments": _attachments(attachments)}
        return build(Sent, self._json("POST", f"/mailboxes/{mailbox_id}/messages", json=_given(body)))

    def reply_to_message(self, mailbox_id: str, message_id: int, text: str, *, html: str | None = None,
                         reply_all: bool = False, attachments: list[tuple[str, str, bytes]] | None = None) -> Sent:
        """Answer a message: to its Reply-To or From ("Re: …"), in its thread."""
        body = {"text": text, "html": html, "reply_all": reply_all, "attachments": _attachments(attachments)}
        return build(Sent, self._json("POST", f"/mailboxes/{mailbox_id}/messages/{message_id}/reply",
                                      json=_given(body)))

    def forward_message(self, mailbox_id: str, message_id: int, to: list[str], text: str | None = None) -> Sent:
        """Forward a message ("Fwd: …"), the original attached exactly as received."""
        return build(Sent, self._json("POST", f"/mailboxes/{mailbox_id}/messages/{message_id}/forward",
                                      json=_given({"to": to, "text": text})))

    def release_message(self, mailbox_id: str, message_id: int, to: list[str]) -> Sent:
        """Send a message a sandbox caught on, exactly as it was caught, to `to` and no one
        else (not its own To, Cc or Bcc), behind Resent-From/-To/-Date/-Message-ID headers.
        A send like send_message, in its limits; a copy of mail the mailbox sent is a
        `conflict` RelayError."""
        return build(Sent, self._json("POST", f"/mailboxes/{mailbox_id}/messages/{message_id}/release",
                                      json={"to": to}))

    def wait_for_delivery(self, mailbox_id: str, message_id: int, timeout_seconds: float = 30) -> DeliveryReport:
        """What became of a message the mailbox sent (`message_id`: the `message_id` that
        send_message, reply_to_message, forward_message or release_message gave), once every recipient is
        final (sent, failed, bounced, complained) or `timeout_seconds` pass: then `.final` is
        False, not an error. A message the mailbox received is a not_found RelayError."""
        deadline = time.monotonic() + timeout_seconds
        pause = 0.2
        while True:
            message = self.get_message(mailbox_id, message_id)
            if message.direction != "out":
                raise RelayError("not_found", "That message was received, not sent: only mail the mailbox sent has "
                                              "a delivery.", 404)
            delivery = list(message.delivery or [])
            # None to wait for (a send from before delivery states) is final, as MCP says.
            final = all(row.status in FINAL_DELIVERY for row in delivery)
            left = deadline - time.monotonic()
            if final or left <= 0:
                return DeliveryReport(delivery=delivery, final=final)
            time.sleep(min(pause, left))
            pause = min(pause * 2, 2.0)

    def list_threads(self, mailbox_id: str) -> list[Thread]:
        """The mailbox's conversations, newest activity first."""
        threads, page = [], 1
        while True:
            answer = self._json("GET", f"/mailboxes/{mailbox_id}/threads", params={"page": page, "page_size": 200})
            threads += [Thread.from_api(item) for item in answer["results"]]
            if not answer.get("next"):
                return threads
            page += 1

    def get_thread(self, mailbox_id: str, thread_id: int) -> Thread:
        """A conversation with its messages, oldest first."""
        return Thread.from_api(self._json("GET", f"/mailboxes/{mailbox_id}/threads/{thread_id}"))

    # --- domains ------------------------------------------------------------------------------------
    def create_domain(self, name: str) -> Domain:
        """Add a domain of your own: the answer lists the DNS records to publish."""
        return Domain.from_api(self._json("POST", "/domains", json={"name": name}))

    def list_domains(self) -> list[Domain]:
        domains, page = [], 1
        while True:
            answer = self._json("GET", "/domains", params={"page": page, "page_size": 200})
            domains += [Domain.from_api(item) for item in answer["results"]]
            if not answer.get("next"):
                return domains
            page += 1

    def get_domain(self, domain_id: str) -> Domain:
        return Domain.from_api(self._json("GET", f"/domains/{domain_id}"))

    def verify_domain(self, domain_id: str) -> Domain:
        """Look the records up now: each record's status, and `verified` once MX and DKIM match."""
        return Domain.from_api(self._json("POST", f"/domains/{domain_id}/verify"))

    def delete_domain(self, domain_id: str) -> bool:
        self._request("DELETE", f"/domains/{domain_id}")
        return True

    def search_messages(self, query: str, mailbox_id: str | None = None) -> list[Message]:
        path = f"/mailboxes/{mailbox_id}/messages" if mailbox_id else "/messages"
        return [Message.from_api(item) for item in self._json("GET", path, params={"q": query})["results"]]

    def events(self, mailbox_id: str, last_event_id: str | None = None) -> Iterator[Event]:
        """The mailbox's event stream: each new message (`message`), then `expired` when
        it ends. A dropped connection is resumed after the last event seen."""
        while True:
            headers = {"Last-Event-ID": last_event_id} if last_event_id else None
            try:
                response = self._request("GET", f"/mailboxes/{mailbox_id}/events", stream=True, headers=headers,
                                         timeout=60)
                with response:
                    for event in _parse_sse(response.iter_lines(decode_unicode=True)):
                        if event.id is not None:
                            last_event_id = event.id
                        yield event
                        if event.event == "expired":
                            return
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError):
                time.sleep(1.0)  # reconnect, resuming after last_event_id
                continue
            return


def verify_webhook(body: bytes, headers: Mapping[str, str], secret: str, tolerance_seconds: int = 300) -> bool:
    """Whether a webhook delivery is Relay's (Standard Webhooks: `webhook-id`,
    `webhook-timestamp`, `webhook-signature`) and recent."""
    lowered = {name.lower(): value for name, value in headers.items()}
    message_id, timestamp = lowered.get("webhook-id", ""), lowered.get("webhook-timestamp", "")
    if not message_id or not (timestamp.isascii() and timestamp.isdigit()) or abs(time.time() - int(timestamp)) > tolerance_seconds:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"{message_id}.{timestamp}.".encode() + body,
                                         hashlib.sha256).digest()).decode()
    offered = [part.partition(",")[2] for part in lowered.get("webhook-signature", "").split() if part.startswith("v1,")]
    return any(hmac.compare_digest(expected, signature) for signature in offered)


def _given(body: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in body.items() if value is not None}


def _attachments(files: list[tuple[str, str, bytes]] | None) -> list[dict[str, str]] | None:
    if files is None:
        return None
    return [{"filename": filename, "content_type": content_type, "content_base64": base64.b64encode(data).decode()}
            for filename, content_type, data in files]


def _retry_after(response: requests.Response) -> float:
    try:
        return min(MAX_RETRY_AFTER_SECONDS, max(0.0, float(response.headers.get("Retry-After", "1"))))
    except ValueError:
        return 1.0


def _error(response: requests.Response) -> RelayError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    return RelayError(body.get("code", f"http_{response.status_code}"), body.get("message", response.reason or ""),
                      response.status_code, body.get("fields"))


class _in_minutes:
    """The API measures a lifetime in milliseconds (`ttl_ms`); a caller of this client gave
    minutes (`ttl_minutes`), so a refusal of the lifetime is said in minutes too."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> None:
        if isinstance(error, RelayError) and "ttl_ms" in error.fields:
            fields = {("ttl_minutes" if name == "ttl_ms" else name): problems for name, problems in error.fields.items()}
            fields["ttl_minutes"] = [_ms_said_in_minutes(str(problem)) for problem in
                                     (fields["ttl_minutes"] if isinstance(fields["ttl_minutes"], list)
                                      else [fields["ttl_minutes"]])]
            raise RelayError(error.code, _ms_said_in_minutes(error.message), error.status, fields) from None


def _ms_said_in_minutes(text: str) -> str:
    """"between 300000 and 3600000 on the pro plan" -> "between 5 and 60 minutes on the pro
    plan": every figure in a lifetime's reason is milliseconds."""
    figures = list(re.finditer(r"\b\d+\b", text))
    for index, figure in reversed(list(enumerate(figures))):
        whole, part = divmod(int(figure.group()), MINUTE_MS)
        minutes = (f"{whole}" if not part else f"{int(figure.group()) / MINUTE_MS:.2f}".rstrip("0")) + (
            " minutes" if index == len(figures) - 1 else "")
        text = text[:figure.start()] + minutes + text[figure.end():]
    return re.sub(r"\bttl_ms\b", "ttl_minutes", text)


def _parse_sse(lines: Iterator[str]) -> Iterator[Event]:
    import json

    name, data, event_id = "message", [], None
    for line in lines:
        if line == "":
            if data:
                yield Event(event=name, data=json.loads("\n".join(data)), id=event_id)
            name, data, event_id = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                event_id = value
