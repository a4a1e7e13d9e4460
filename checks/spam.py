"""A message's spam score from SpamAssassin's spamd (RELAY_SPAMD_URL), through aiospamc."""
import asyncio
import logging
import re
from urllib.parse import urlsplit

import aiospamc
from aiospamc.exceptions import ClientException, TimeoutException
from aiospamc.responses import ResponseException
from django.conf import settings

from mailboxes.errors import BackendUnavailable, NotConfigured

logger = logging.getLogger(__name__)

# A line of spamd's report table: " 1.2 RULE_NAME   Description", which may wrap.
RULE_LINE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s+([A-Z0-9_]+)\s+(.*)$")
CONTINUED = re.compile(r"^\s{20,}(\S.*)$")


class SpamdUnavailable(BackendUnavailable):
    default_message = "The spam checker did not answer; try again later."


def spamd_address(url: str) -> tuple[str, int]:
    """`spamd://host:port` (the port defaults to spamd's 783)."""
    parts = urlsplit(url)
    if parts.scheme != "spamd" or not parts.hostname:
        raise ValueError(f"RELAY_SPAMD_URL must be spamd://host:port, got {url!r}")
    return parts.hostname, parts.port or 783


def rules_of(report: str) -> list[dict]:
    """The rules spamd's report lists, with their scores and descriptions."""
    rules: list[dict] = []
    table = report.partition("\n---- ")[2].partition("\n")[2]
    for line in table.splitlines():
        if match := RULE_LINE.match(line):
            rules.append({"name": match.group(2), "score": float(match.group(1)),
                          "description": match.group(3).strip()})
        elif rules and (match := CONTINUED.match(line)):
            rules[-1]["description"] += " " + match.group(1).strip()
    return rules


async def spam_report(raw: bytes) -> dict:
    """{"score", "threshold", "is_spam", "rules"}; NotConfigured or SpamdUnavailable."""
    if not settings.RELAY_SPAMD_URL:
        raise NotConfigured("No spam checker is configured here (RELAY_SPAMD_URL is not set).")
    host, port = spamd_address(settings.RELAY_SPAMD_URL)
    seconds = settings.RELAY_SPAMD_TIMEOUT_SECONDS
    try:
        response = await aiospamc.report(raw, host=host, port=port,
                                         timeout=aiospamc.Timeout(total=seconds, connection=min(5, seconds)))
        verdict = response.headers["Spam"]
    except (ClientException, TimeoutException, ResponseException, OSError, asyncio.TimeoutError, KeyError) as exc:
        logger.warning("spamd at %s:%s did not answer: %s", host, port, f"{type(exc).__name__}: {exc}"[:200])
        raise SpamdUnavailable() from None
    return {"score": verdict.score, "threshold": verdict.threshold, "is_spam": bool(verdict.value),
            "rules": rules_of(response.body.decode("utf-8", "replace"))}

