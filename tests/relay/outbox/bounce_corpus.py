"""Bounces and complaints as real servers write them: the suite's own copies of the
formats of Postfix, Exim, Microsoft 365 and Gmail, and an ARF feedback report (RFC 5965).
Each takes the bounce address it goes back to and the recipient it names."""

ORIGINAL = """Return-Path: <{bounce_to}>
From: box@relay.localhost
To: {recipient}
Subject: Hello
Message-ID: <original@relay.localhost>
"""


def postfix(bounce_to: str, recipient: str) -> bytes:
    return f"""From: MAILER-DAEMON@mx.example.net (Mail Delivery System)
Subject: Undelivered Mail Returned to Sender
To: {bounce_to}
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
\tboundary="4F1B2C3D4E.1764327600/mx.example.net"
Message-Id: <20261128110000.4F1B2C3D4E@mx.example.net>

This is a MIME-encapsulated message.

--4F1B2C3D4E.1764327600/mx.example.net
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

This is the mail system at host mx.example.net.

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients. It's attached below.

                   The mail system

<{recipient}>: host mx.example.net[192.0.2.1] said: 550 5.1.1
    <{recipient}>: Recipient address rejected: User unknown in local
    recipient table (in reply to RCPT TO command)

--4F1B2C3D4E.1764327600/mx.example.net
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.example.net
X-Postfix-Queue-ID: 4F1B2C3D4E
X-Postfix-Sender: rfc822; {bounce_to}
Arrival-Date: Sat, 28 Nov 2026 11:00:00 +0000 (UTC)

Final-Recipient: rfc822; {recipient}
Original-Recipient: rfc822;{recipient}
Action: failed
Status: 5.1.1
Remote-MTA: dns; mx.example.net
Diagnostic-Code: smtp; 550 5.1.1 <{recipient}>: Recipient address rejected:
    User unknown in local recipient table

--4F1B2C3D4E.1764327600/mx.example.net
Content-Description: Undelivered Message Headers
Content-Type: text/rfc822-headers

{ORIGINAL.format(bounce_to=bounce_to, recipient=recipient)}
--4F1B2C3D4E.1764327600/mx.example.net--
""".replace("\n", "\r\n").encode()


def postfix_delayed(bounce_to: str, recipient: str) -> bytes:
    return postfix(bounce_to, recipient).replace(b"Action: failed", b"Action: delayed").replace(
        b"Status: 5.1.1", b"Status: 4.4.1").replace(b"Diagnostic-Code: smtp; 550 5.1.1", b"Diagnostic-Code: smtp; 451 4.4.1")


def exim(bounce_to: str, recipient: str) -> bytes:
    """Exim's default bounce: plain text, no delivery-status part."""
    return f"""From: Mail Delivery System <Mailer-Daemon@mx.example.org>
To: {bounce_to}
Subject: Mail delivery failed: returning message to sender
Message-Id: <E1vAbCd-000123-4X@mx.example.org>
X-Failed-Recipients: {recipient}
Auto-Submitted: auto-replied
Date: Sat, 28 Nov 2026 11:00:00 +0000

This message was created automatically by mail delivery software.

A message that you sent could not be delivered to one or more of its
recipients. This is a permanent error. The following address(es) failed:

  {recipient}
    host mx.example.org [192.0.2.2]
    SMTP error from remote mail server after RCPT TO:<{recipient}>:
    550 5.1.1 User unknown

------ This is a copy of the message, including all the headers. ------

{ORIGINAL.format(bounce_to=bounce_to, recipient=recipient)}
Hello there.
""".replace("\n", "\r\n").encode()


def microsoft365(bounce_to: str, recipient: str) -> bytes:
    return f"""From: postmaster@contoso.onmicrosoft.com
To: {bounce_to}
Date: Sat, 28 Nov 2026 11:00:00 +0000
Content-Type: multipart/report; report-type=delivery-status;
\tboundary="b2f3c4d5-ms-365"
MIME-Version: 1.0
Message-ID: <b2f3c4d5@BN8PR12MB1234.namprd12.prod.outlook.com>
Subject: Undeliverable: Hello
Auto-Submitted: auto-replied

--b2f3c4d5-ms-365
Content-Type: multipart/alternative; differences=Content-Type;
\tboundary="alt-b2f3c4d5"

--alt-b2f3c4d5
Content-Type: text/plain; charset="us-ascii"

Your message to {recipient} couldn't be delivered.
{recipient.split("@")[0]} wasn't found at {recipient.split("@")[1]}.

--alt-b2f3c4d5
Content-Type: text/html; charset="us-ascii"

<html><body><p>Your message to {recipient} couldn't be delivered.</p></body></html>

--alt-b2f3c4d5--

--b2f3c4d5-ms-365
Content-Type: message/delivery-status

Reporting-MTA: dns;BN8PR12MB1234.namprd12.prod.outlook.com
Received-From-MTA: dns;mail.relay.localhost
Arrival-Date: Sat, 28 Nov 2026 11:00:00 +0000

Final-Recipient: rfc822;{recipient}
Action: failed
Status: 5.1.10
Diagnostic-Code: smtp;550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient {recipient} not found by SMTP address lookup
Status: 5.1.10

--b2f3c4d5-ms-365
Content-Type: message/rfc822

{ORIGINAL.format(bounce_to=bounce_to, recipient=recipient)}
Hello there.

--b2f3c4d5-ms-365--
""".replace("\n", "\r\n").encode()


def gmail(bounce_to: str, recipient: str) -> bytes:
    return f"""Delivered-To: {bounce_to}
Return-Path: <>
From: Mail Delivery Subsystem <mailer-daemon@googlemail.com>
To: {bounce_to}
Auto-Submitted: auto-replied
Subject: Delivery Status Notification (Failure)
Message-ID: <6745a1b2.050a0220.abcdef.0001.GMR@mx.google.com>
Date: Sat, 28 Nov 2026 03:00:00 -0800 (PST)
MIME-Version: 1.0
Content-Type: multipart/report; boundary="000000000000a1b2c3d4e5f60718"; report-type=delivery-status

--000000000000a1b2c3d4e5f60718
Content-Type: multipart/related; boundary="000000000000a1b2c3d4e5f60720"

--000000000000a1b2c3d4e5f60720
Content-Type: multipart/alternative; boundary="000000000000a1b2c3d4e5f60721"

--000000000000a1b2c3d4e5f60721
Content-Type: text/plain; charset="UTF-8"

** Address not found **

Your message wasn't delivered to {recipient} because the address couldn't be found, or is unable to receive mail.

The response from the remote server was:
550 5.1.1 The email account that you tried to reach does not exist.

--000000000000a1b2c3d4e5f60721--
--000000000000a1b2c3d4e5f60720--

--000000000000a1b2c3d4e5f60718
Content-Type: message/delivery-status

Reporting-MTA: dns; googlemail.com
Received-From-MTA: dns; box@relay.localhost
Arrival-Date: Sat, 28 Nov 2026 03:00:00 -0800 (PST)
X-Original-Message-ID: <original@relay.localhost>

Final-Recipient: rfc822; {recipient}
Action: failed
Status: 5.1.1
Remote-MTA: dns; gmail-smtp-in.l.google.com. (142.250.102.27, the server for the domain gmail.com.)
Diagnostic-Code: smtp; 550-5.1.1 The email account that you tried to reach does not exist. Please try
 550-5.1.1 double-checking the recipient's email address for typos or
 550 5.1.1 unnecessary spaces. https://support.google.com/mail/?p=NoSuchUser
Last-Attempt-Date: Sat, 28 Nov 2026 03:00:01 -0800 (PST)

--000000000000a1b2c3d4e5f60718
Content-Type: message/rfc822

{ORIGINAL.format(bounce_to=bounce_to, recipient=recipient)}
Hello there.

--000000000000a1b2c3d4e5f60718--
""".replace("\n", "\r\n").encode()


def arf(bounce_to: str, recipient: str | None) -> bytes:
    """A feedback report; without `recipient`, one that names none (as many do)."""
    rcpt_line = f"Original-Rcpt-To: <{recipient}>\n" if recipient else ""
    return f"""From: <abuse@mail.example.net>
Date: Sat, 28 Nov 2026 11:00:00 +0000
Subject: FW: Hello
To: {bounce_to}
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report;
\tboundary="part1_13d.2e68ed54_boundary"

--part1_13d.2e68ed54_boundary
Content-Type: text/plain; charset="US-ASCII"
Content-Transfer-Encoding: 7bit

This is an email abuse report for an email message received from IP
192.0.2.1 on Sat, 28 Nov 2026 10:59:00 +0000.
For more information about this format please see
https://www.rfc-editor.org/rfc/rfc5965.

--part1_13d.2e68ed54_boundary
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: SomeGenerator/1.0
Version: 1
Original-Mail-From: <{bounce_to}>
{rcpt_line}Arrival-Date: Sat, 28 Nov 2026 10:59:00 +0000
Source-IP: 192.0.2.1
Reported-Domain: relay.localhost

--part1_13d.2e68ed54_boundary
Content-Type: message/rfc822
Content-Disposition: inline

{ORIGINAL.format(bounce_to=bounce_to, recipient=recipient or "someone@example.net")}
Hello there.

--part1_13d.2e68ed54_boundary--
""".replace("\n", "\r\n").encode()
