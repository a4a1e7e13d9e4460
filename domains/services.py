"""Domains of one's own: add (a sealed key pair made), list, look at, verify by DNS."""
import logging
import re
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from accounts.errors import Conflict, InvalidRequest, NotFound, QuotaExceeded
from accounts.models import Account, plan_limit
from domains import keys, records
from domains.models import Domain, DomainStatus
from core.clock import db_now

logger = logging.getLogger(__name__)

_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
NAME_RE = re.compile(rf"({_LABEL}\.)+[a-z]([a-z0-9-]{{0,61}}[a-z0-9])?")


def name_check(name: str) -> str:
    """`name` lowercased without a final dot, if it may be added (two labels or more, ASCII,
    not under RELAY_DOMAINS); InvalidRequest otherwise."""
    name = name.strip().lower().removesuffix(".")
    if len(name) > 253 or not NAME_RE.fullmatch(name):
        raise InvalidRequest("name must be a domain name such as mail.example.com (ASCII; xn-- for an "
                             "international name).", field="name")
    for own in settings.RELAY_DOMAINS:
        if name == own or name.endswith("." + own):
            raise InvalidRequest(f"{name} is one of Relay's own domains or under one.", field="name")
    return name


# A pending claim lapses after this long unverified: a name is never held by a claim
# nobody proves.
CLAIM_LIFETIME = timedelta(days=7)


def claims_lapsed(now) -> QuerySet:
    return Domain.objects.filter(status=DomainStatus.PENDING, created_at__lte=now - CLAIM_LIFETIME)


def claims_purge_lapsed() -> int:
    """Daily (with the retention purge): remove the claims that lapsed unverified."""
    removed = claims_lapsed(db_now()).delete()[0]
    if removed:
        logger.info("removed %d domain claim(s) left unverified for %d days", removed, CLAIM_LIFETIME.days)
    return removed


def domain_create(*, owner: Account, name: str) -> Domain:
    """Claim `name` for `owner`, pending until verified; other accounts may claim it too and
    the first to verify wins. Conflict if verified elsewhere; at most the plan's domains."""
    name = name_check(name)
    limit = plan_limit(owner.plan, "domains")
    lapsed = claims_lapsed(db_now()).filter(Q(owner=owner) | Q(name=name)).delete()[0]
    if lapsed:
        logger.info("%d lapsed domain claim(s) removed", lapsed)
    _quota_check(owner, limit)  # before the key, which costs a tenth of a second of CPU
    if Domain.objects.filter(name=name).filter(Q(owner=owner) | Q(status=DomainStatus.VERIFIED)).exists():
        raise Conflict(f"{name} has already been added.")
    private_pem, public_key = keys.new_key_pair()
    try:
        with transaction.atomic():
            # The account's row lock orders concurrent adds: each counts the others'.
            list(Account.objects.select_for_update().filter(id=owner.id).values_list("id", flat=True))
            _quota_check(owner, limit)
            domain = Domain.objects.create(owner=owner, name=name, selector=settings.RELAY_DKIM_SELECTOR,
                                           dkim_public_key=public_key, dkim_private_key=keys.seal(private_pem))
    except IntegrityError:
        raise Conflict(f"{name} has already been added.") from None
    logger.info("account %s added domain %s", owner.login, name)
    return domain


def _quota_check(owner: Account, limit: int) -> None:
    if Domain.objects.filter(owner=owner).count() >= limit:
        raise QuotaExceeded(f"The {owner.plan} plan allows {limit} custom domains; delete one first.", retry_after=60)


def domains_of(owner: Account) -> QuerySet:
    return Domain.objects.filter(owner=owner).order_by("-created_at", "-id")


def domain_get(*, owner: Account, domain_id) -> Domain:
    """One of `owner`'s domains; another account's is not found, exactly as a missing one."""
    domain = Domain.objects.filter(id=domain_id, owner=owner).first()
    if domain is None:
        raise NotFound("No such domain.")
    return domain


# Verifications an account may start in a minute of the database's clock: each is
# uncached look-ups at names the caller chose.
VERIFIES_PER_MINUTE = 6


def _verify_budget_spend(owner: Account) -> None:
    """Count one verification against the account's minute (by the database's clock, in
    the shared cache); QuotaExceeded once the minute's are spent."""
    now = db_now().timestamp()
    minute = int(now // 60)
    key = f"relay:domain-verifies:{owner.id}:{minute}"
    cache.add(key, 0, timeout=120)
    try:
        spent = cache.incr(key)
    except ValueError:  # expired between the two calls
        cache.add(key, 1, timeout=120)
        spent = 1
    if spent > VERIFIES_PER_MINUTE:
        raise QuotaExceeded(f"At most {VERIFIES_PER_MINUTE} domain checks a minute per account; DNS changes take "
                            "a while to show anyway.", retry_after=60 - int(now % 60))


def domain_verify(*, owner: Account, domain_id) -> Domain:
    """Look the domain's records up: verified once MX and DKIM match, and it stays verified.
    At most VERIFIES_PER_MINUTE an account."""
    domain = domain_get(owner=owner, domain_id=domain_id)
    _verify_budget_spend(owner)
    found = records.check(domain)
    now = db_now()
    fields = {"record_status": found, "checked_at": now}
    if domain.status == DomainStatus.PENDING and all(found[kind] == records.OK for kind in records.REQUIRED):
        fields.update(status=DomainStatus.VERIFIED, verified_at=now)
    try:
        with transaction.atomic():
            Domain.objects.filter(id=domain.id).update(**fields)
            if fields.get("status") == DomainStatus.VERIFIED:
                # Won: the records published are this claim's key, so the others cannot be proved.
                Domain.objects.filter(name=domain.name, status=DomainStatus.PENDING).exclude(id=domain.id).delete()
    except IntegrityError:  # another account's claim verified a moment earlier
        raise Conflict(f"{domain.name} was verified by another account.") from None
    for field, value in fields.items():
        setattr(domain, field, value)
    logger.info("verified domain %s for %s: %s (%s)", domain.name, owner.login, domain.status,
                ", ".join(f"{kind} {status}" for kind, status in found.items()))
    return domain


def verified_domain(*, owner: Account | None, name: str, lock: bool = False) -> Domain | None:
    """`owner`'s verified domain `name`, or None. `lock`: hold its row until the caller's
    transaction ends (a mailbox being created on it, against a concurrent delete)."""
    if owner is None:
        return None
    found = Domain.objects.filter(owner=owner, name=name, status=DomainStatus.VERIFIED)
    return (found.select_for_update() if lock else found).first()


def signing_key(name: str) -> tuple[str, bytes] | None:
    """The selector and private key (PEM) that sign mail from `name`: its domain's, or the
    one of RELAY_DKIM_PRIVATE_KEY_FILE for RELAY_DOMAINS; None when nothing signs it."""
    domain = (Domain.objects.filter(name=name, status=DomainStatus.VERIFIED)
              .values_list("selector", "dkim_private_key").first())
    if domain is not None:
        return domain[0], keys.unseal(domain[1])
    if name in settings.RELAY_DOMAINS and settings.RELAY_DKIM_PRIVATE_KEY_FILE:
        with open(settings.RELAY_DKIM_PRIVATE_KEY_FILE, "rb") as file:
            return settings.RELAY_DKIM_SELECTOR, file.read()
    return None
