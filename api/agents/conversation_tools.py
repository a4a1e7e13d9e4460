"""The MCP tools for conversations (docs/agents.md): sending, replying, forwarding, releasing
a sandbox's catch, threads."""
from typing import Annotated

from mcp_types import CallToolResult
from pydantic import BaseModel, ConfigDict, Field

from api.agents.declare import Queued, ThreadList, ThreadWhole, calling, result, tool
from api.agents.tools import LISTED_MAX, MailboxId, MessageId
from api.conversation_serializers import ThreadDetailSerializer, ThreadSerializer
from mailboxes.threads import thread_get, thread_list, thread_messages, thread_participants
from relay import reading
from relay.models import OutboxMail
from relay.outbox.outbound import forward_queue, outbound_queue, release_queue, reply_queue, sending_checked


class AttachmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filename: Annotated[str, Field(description="One line, e.g. report.pdf.")]
    content_type: Annotated[str, Field(description="type/subtype, e.g. application/pdf.")]
    content_base64: Annotated[str, Field(description="The bytes, base64.")]


Addresses = Annotated[list[str] | None, Field(description="Addresses (up to 50).")]
Text = Annotated[str, Field(description="The plain-text body.")]
Html = Annotated[str | None, Field(description="An HTML body besides the text.")]
Attachments = Annotated[list[AttachmentIn] | None, Field(
    description="Files to attach (up to 20); the whole mail within the server's size limit (too_large).")]
ThreadId = Annotated[int, Field(description="The thread's id, as list_threads or a message's thread_id gave it.", ge=1)]


def _queued(mail: OutboxMail) -> CallToolResult:
    return result({"id": mail.id, "status": mail.status, "message_id": mail.kept_as_id})


def _checked(**arguments) -> dict:
    """The arguments given, checked by the rules a send takes at every door."""
    if arguments.get("attachments") is not None:
        arguments["attachments"] = [attachment.model_dump() for attachment in arguments["attachments"]]
    return sending_checked({name: value for name, value in arguments.items() if value is not None})


@tool(output=Queued, open_world=True)
def send_message(mailbox_id: MailboxId,
                 to: Annotated[list[str], Field(description="1 to 50 recipient addresses.")],
                 subject: Annotated[str, Field(description="One line.")],
                 text: Text, cc: Addresses = None,
                 bcc: Annotated[list[str] | None, Field(description="Hidden recipients: in no header sent.")] = None,
                 reply_to: Annotated[str | None, Field(description="Where replies should go, if not to this "
                                                                  "mailbox.")] = None,
                 html: Html = None, attachments: Attachments = None) -> CallToolResult:
    """Send a mail from the mailbox's address to the outside world. It is queued and
    leaves within seconds: returns {"id" (its outbox entry), "status": "queued",
    "message_id" (the copy kept in the mailbox, direction out)}. Needs an account's API
    key (a mailbox token cannot send: forbidden). Errors: quota_exceeded (the plan's
    sends per day, or recipients per send: To, Cc and Bcc together), too_large, expired,
    invalid_request."""
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id)
    return _queued(outbound_queue(mailbox=mailbox, **_checked(
        to=to, subject=subject, text=text, cc=cc, bcc=bcc, reply_to=reply_to, html=html, attachments=attachments)))


@tool(output=Queued, open_world=True)
def reply_to_message(mailbox_id: MailboxId, message_id: MessageId, text: Text, html: Html = None,
                     reply_all: Annotated[bool, Field(description="Also to the original's To and Cc (never this "
                                                                  "mailbox).")] = False,
                     attachments: Attachments = None) -> CallToolResult:
    """Answer a message of the mailbox: to its Reply-To or From, subject "Re: …", with the
    headers that keep it in the conversation's thread. Returns {"id", "status",
    "message_id"} like send_message, with its errors, and not_found."""
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id)
    return _queued(reply_queue(mailbox=mailbox, message_id=message_id, reply_all=reply_all,
                               **_checked(text=text, html=html, attachments=attachments)))


@tool(output=Queued, open_world=True)
def forward_message(mailbox_id: MailboxId, message_id: MessageId,
                    to: Annotated[list[str], Field(description="1 to 50 recipient addresses.")],
                    text: Annotated[str | None, Field(description="A note above the forwarded message.")] = None,
                    ) -> CallToolResult:
    """Forward a message of the mailbox: subject "Fwd: …", the original attached whole,
    exactly as it was received. Returns {"id", "status", "message_id"} like send_message.
    """
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id)
    return _queued(forward_queue(mailbox=mailbox, message_id=message_id, **_checked(to=to, text=text)))


@tool(output=Queued, open_world=True)
def release_message(mailbox_id: MailboxId, message_id: MessageId,
                    to: Annotated[list[str], Field(description="1 to 50 addresses: the only ones it is sent to.")],
                    ) -> CallToolResult:
    """Release mail a sandbox caught: send it on, exactly as the app sent it, to the
    addresses in `to` and to no one else (not its own To, Cc or Bcc), with Resent-From (the
    mailbox), Resent-To, Resent-Date and Resent-Message-ID headers before it. A send like
    send_message, with its limits: returns {"id", "status", "message_id" (the copy kept,
    direction out: wait_for_delivery takes it)}. Errors: forbidden (a mailbox token cannot
    send), quota_exceeded, suppressed (an address that bounced or complained), too_large,
    conflict (a copy of mail the mailbox sent, which cannot be released), not_found,
    expired, invalid_request."""
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id)
    return _queued(release_queue(mailbox=mailbox, message_id=message_id, **_checked(to=to)))


@tool(output=ThreadList, read_only=True, idempotent=True, mail=True)
def list_threads(mailbox_id: MailboxId) -> CallToolResult:
    """The mailbox's conversations, newest activity first (the 50 latest): {"threads":
    [{id, subject, participants, message_count, unread_count, last_message_at}, ...]}.
    Use get_thread for its messages. Errors: expired, not_found."""
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id, fresh=True)
    threads = list(thread_list(mailbox_id=mailbox.id)[:LISTED_MAX])
    participants = thread_participants([thread.id for thread in threads])
    return result({"threads": ThreadSerializer(threads, many=True, context={"participants": participants}).data})


@tool(output=ThreadWhole, read_only=True, idempotent=True, mail=True)
def get_thread(mailbox_id: MailboxId, thread_id: ThreadId) -> CallToolResult:
    """One conversation with its messages, oldest first, received (direction "in") and
    sent ("out") alike; get_message reads one whole. Errors: not_found, expired."""
    mailbox = reading.mailbox_open(caller=calling(), mailbox_id=mailbox_id, fresh=True)
    thread = thread_get(mailbox_id=mailbox.id, thread_id=thread_id)
    context = {"participants": thread_participants([thread.id]), "messages": thread_messages([thread])}
    return result(dict(ThreadDetailSerializer(thread, context=context).data))


CONVERSATION_TOOLS = [send_message, reply_to_message, forward_message, release_message, list_threads, get_thread]
