"""A sandbox's page in the web inbox (docs/sandbox.md, docs/inbox.md): its SMTP settings as
each framework takes them, the fault editor's form read into a rule for mailboxes.faults to
check, and each caught message's envelope recipients, a Bcc told apart."""
import re
from email.utils import getaddresses

from django.utils.translation import gettext as _

from accounts.errors import InvalidRequest
from accounts.inputs import whole_number
from mailboxes.faults import TIMES_MAX
from mailboxes.models import FaultStage

# The recipients a row of the list names; the message's page names them all.
ROW_RECIPIENTS = 5
_DECIMAL = re.compile(r"[0-9]{1,6}(\.[0-9]{1,6})?|\.[0-9]{1,6}")


def password_placeholder() -> str:
    """What a snippet shows where the password was not just made: it is shown once."""
    return _("<shown once: press 'New password' for another>")


def snippets(smtp: dict, *, tls: bool = True) -> list[dict]:
    """The sandbox's settings (lifecycle.smtp_settings, its password or the placeholder) as
    Django, Rails, Laravel, nodemailer and Spring are configured: each {id, name, where,
    text}. Without `tls` (this Relay has no certificate, so offers no STARTTLS) each says
    so, as an app on the same host then signs in without it."""
    host, port, user, password = smtp["host"], smtp["port"], smtp["username"], smtp["password"]
    use_tls, ruby_tls, laravel_tls, java_tls = (
        ("True  # STARTTLS", "true", "tls", "true") if tls else
        ("False  # this Relay has no certificate: from the same host only", "false", "null", "false"))
    node_tls = ("  secure: false,     // STARTTLS: the connection starts plain\n  requireTLS: true,\n" if tls else
                "  secure: false,\n  ignoreTLS: true,   // this Relay has no certificate: from the same host only\n")
    return [
        {"id": "django", "name": "Django", "where": "settings.py", "text": (
            'EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"\n'
            f'EMAIL_HOST = "{host}"\n'
            f"EMAIL_PORT = {port}\n"
            f'EMAIL_HOST_USER = "{user}"\n'
            f'EMAIL_HOST_PASSWORD = "{password}"\n'
            f"EMAIL_USE_TLS = {use_tls}\n")},
        {"id": "rails", "name": "Rails", "where": "config/environments/staging.rb", "text": (
            "config.action_mailer.delivery_method = :smtp\n"
            "config.action_mailer.smtp_settings = {\n"
            f'  address: "{host}",\n'
            f"  port: {port},\n"
            f'  user_name: "{user}",\n'
            f'  password: "{password}",\n'
            "  authentication: :plain,\n"
            f"  enable_starttls: {ruby_tls}" + ("" if tls else ",\n  enable_starttls_auto: false") + "\n"
            "}\n")},
        {"id": "laravel", "name": "Laravel", "where": ".env", "text": (
            "MAIL_MAILER=smtp\n"
            f"MAIL_HOST={host}\n"
            f"MAIL_PORT={port}\n"
            f'MAIL_USERNAME="{user}"\n'
            f'MAIL_PASSWORD="{password}"\n'
            f"MAIL_ENCRYPTION={laravel_tls}\n")},
        {"id": "nodemailer", "name": "Node.js (nodemailer)", "where": "mailer.js", "text": (
            'const nodemailer = require("nodemailer");\n\n'
            "const transporter = nodemailer.createTransport({\n"
            f'  host: "{host}",\n'
            f"  port: {port},\n"
            f"{node_tls}"
            f'  auth: {{ user: "{user}", pass: "{password}" }},\n'
            "});\n")},
        {"id": "spring", "name": "Spring", "where": "application.properties", "text": (
            f"spring.mail.host={host}\n"
            f"spring.mail.port={port}\n"
            f"spring.mail.username={user}\n"
            f"spring.mail.password={password}\n"
            "spring.mail.properties.mail.smtp.auth=true\n"
            f"spring.mail.properties.mail.smtp.starttls.enable={java_tls}\n"
            f"spring.mail.properties.mail.smtp.starttls.required={java_tls}\n")},
    ]


def stage_choices() -> list[tuple[str, str]]:
    """Each stage with what it means to someone who has not read RFC 5321."""
    return [(FaultStage.AUTH, _("auth: at login (AUTH)")),
            (FaultStage.MAIL, _("mail: at the sender (MAIL FROM)")),
            (FaultStage.RCPT, _("rcpt: at each recipient (RCPT TO)")),
            (FaultStage.DATA, _("data: at the message itself (DATA)"))]


def _decimal(text: str, *, field: str, message: str) -> float | None:
    text = text.strip()
    if text == "":
        return None
    if not _DECIMAL.fullmatch(text):
        raise InvalidRequest(message, field=field)
    return float(text)


def rule_from_form(form) -> dict:
    """The fault editor's fields as a rule (the API's names and types; an empty field left
    out, so its default applies); mailboxes.faults checks the rest. InvalidRequest names
    the field a number could not be read from."""
    rule = {"stage": form.get("stage", ""), "message": form.get("message", "").strip(),
            "match": form.get("match", "").strip()}
    numbers = {
        "code": whole_number(form.get("code", "").strip(), field="code", low=400, high=599),
        "probability": _decimal(form.get("probability", ""), field="probability",
                                message="probability must be a number from 0 to 1."),
        "times": whole_number(form.get("times", "").strip(), field="times", low=1, high=TIMES_MAX),
        "delay_seconds": _decimal(form.get("delay_seconds", ""), field="delay_seconds",
                                  message="delay_seconds must be a number from 0 to 30."),
    }
    return rule | {name: value for name, value in numbers.items() if value is not None}


def rules_shown(rules: list) -> list[dict]:
    """The sandbox's rules as the page lists them, its numbers as a person writes them."""
    return [{"id": rule.id, "stage": rule.stage, "code": rule.code, "message": rule.message, "match": rule.match,
             "probability": f"{rule.probability:g}", "times": rule.times, "remaining": rule.remaining,
             "delay_seconds": f"{rule.delay_seconds:g}"} for rule in rules]


def envelope_recipients(rcpt_to: list, to_header: str, cc_header: str) -> list[dict]:
    """Each envelope recipient ({address, bcc}): a Bcc is one no To or Cc header names."""
    named = {address.lower() for _name, address in getaddresses([to_header or "", cc_header or ""]) if address}
    return [{"address": address, "bcc": address.lower() not in named} for address in rcpt_to]
