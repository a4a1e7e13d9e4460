"""A sandbox's fault rules (docs/sandbox.md, "Faults"): set, read and cleared by every door,
and the one rule for which answer, if any, a fault gives at a stage of a submission."""
import fnmatch
import random
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F

from mailboxes.errors import InvalidRequest, MailboxExpired
from mailboxes.mail_format import breaks_line
from mailboxes.models import FaultRule, FaultStage, Mailbox, MailboxStatus

RULES_MAX = 20
MESSAGE_MAX = 200
MATCH_MAX = 320
DELAY_MAX_SECONDS = 30
TIMES_MAX = 1_000_000


@dataclass(frozen=True)
class FaultAnswer:
    reply: str
    delay_seconds: float


def fault_rule_checked(rule: object) -> dict:
    """One rule as stored, from what a door was sent; InvalidRequest naming the field at
    fault (`rules` for a rule that is not an object or has a field no rule has)."""
    def refuse(field: str, message: str) -> InvalidRequest:
        return InvalidRequest(message, field=field)

    if not isinstance(rule, dict):
        raise refuse("rules", "must be an object.")
    unknown = set(rule) - {"stage", "code", "message", "match", "probability", "times", "delay_seconds"}
    if unknown:
        raise refuse("rules", f"unknown field {sorted(unknown)[0]}.")
    stage = rule.get("stage")
    if stage not in FaultStage.values:
        raise refuse("stage", f"stage must be one of {', '.join(FaultStage.values)}.")
    code = rule.get("code")
    if type(code) is not int or not 400 <= code <= 599:
        raise refuse("code", "code must be an SMTP reply code from 400 to 599.")
    message = rule.get("message", "")
    if not isinstance(message, str) or len(message) > MESSAGE_MAX or breaks_line(message) or not message.isprintable():
        raise refuse("message", f"message must be one line of at most {MESSAGE_MAX} printable characters.")
    match = rule.get("match", "")
    if not isinstance(match, str) or len(match) > MATCH_MAX or breaks_line(match):
        raise refuse("match", f"match must be a glob of at most {MATCH_MAX} characters on one line.")
    probability = rule.get("probability", 1)
    if type(probability) not in (int, float) or not 0 <= probability <= 1:
        raise refuse("probability", "probability must be a number from 0 to 1.")
    times = rule.get("times")
    if times is not None and (type(times) is not int or not 1 <= times <= TIMES_MAX):
        raise refuse("times", f"times must be an integer from 1 to {TIMES_MAX}, or absent.")
    delay = rule.get("delay_seconds", 0)
    if type(delay) not in (int, float) or not 0 <= delay <= DELAY_MAX_SECONDS:
        raise refuse("delay_seconds", f"delay_seconds must be a number from 0 to {DELAY_MAX_SECONDS}.")
    return {"stage": stage, "code": code, "message": message, "match": match.lower(),
            "probability": float(probability), "times": times, "remaining": times, "delay_seconds": float(delay)}


def _checked(index: int, rule: object) -> dict:
    """fault_rule_checked for the rule at `index` of a list: the error names it."""
    try:
        return fault_rule_checked(rule)
    except InvalidRequest as refused:
        raise InvalidRequest(f"rule {index}: {refused.message}", field="rules") from None


def faults_set(*, mailbox: Mailbox, rules: object) -> list[FaultRule]:
    """Replace the sandbox's fault rules with `rules` (each checked; InvalidRequest naming
    the rule), their `times` counted afresh. MailboxExpired once it has ended."""
    if not mailbox.sandbox:
        raise InvalidRequest("This mailbox is not a sandbox; only a sandbox has fault rules.")
    if not isinstance(rules, list) or len(rules) > RULES_MAX:
        raise InvalidRequest(f"rules must be a list of at most {RULES_MAX} rules.", field="rules")
    checked = [_checked(index, rule) for index, rule in enumerate(rules)]
    with transaction.atomic():
        # The row's lock orders two PUTs: the later one's rules stand whole.
        if not Mailbox.objects.select_for_update().filter(id=mailbox.id, status=MailboxStatus.ACTIVE).exists():
            raise MailboxExpired()
        FaultRule.objects.filter(mailbox=mailbox).delete()
        return FaultRule.objects.bulk_create(
            FaultRule(mailbox=mailbox, position=position, **rule) for position, rule in enumerate(checked))


def fault_rule_add(*, mailbox: Mailbox, rule: object) -> FaultRule:
    """Add one rule after the sandbox's others, whose `remaining` stay as they are (the web
    inbox's editor); checked as faults_set checks each. MailboxExpired once it has ended."""
    if not mailbox.sandbox:
        raise InvalidRequest("This mailbox is not a sandbox; only a sandbox has fault rules.")
    checked = fault_rule_checked(rule)
    with transaction.atomic():
        if not Mailbox.objects.select_for_update().filter(id=mailbox.id, status=MailboxStatus.ACTIVE).exists():
            raise MailboxExpired()
        held = FaultRule.objects.filter(mailbox=mailbox).count()  # positions are 0 … held - 1
        if held >= RULES_MAX:
            raise InvalidRequest(f"A sandbox holds at most {RULES_MAX} rules; remove one first.", field="rules")
        return FaultRule.objects.create(mailbox=mailbox, position=held, **checked)


def fault_rule_remove(*, mailbox: Mailbox, rule_id: int) -> bool:
    """Remove one of the sandbox's rules, by its id (a rule replaced since by a PUT is gone
    already: False); the rules after it move up, so positions stay 0 … n - 1."""
    with transaction.atomic():
        Mailbox.objects.select_for_update().filter(id=mailbox.id).exists()
        removed = FaultRule.objects.filter(mailbox=mailbox, id=rule_id).first()
        if removed is None:
            return False
        removed.delete()
        # One row at a time, in order: each moves into the place the one before it left.
        for later in FaultRule.objects.filter(mailbox=mailbox, position__gt=removed.position).order_by("position"):
            FaultRule.objects.filter(id=later.id).update(position=later.position - 1)
    return True


def faults_get(*, mailbox: Mailbox) -> list[FaultRule]:
    return list(FaultRule.objects.filter(mailbox=mailbox))


def faults_clear(*, mailbox: Mailbox) -> None:
    FaultRule.objects.filter(mailbox=mailbox).delete()


def fault_rules_of(mailbox_id) -> list[FaultRule]:
    """What the submission port reads once per transaction: the sandbox's live rules."""
    return list(FaultRule.objects.filter(mailbox_id=mailbox_id).exclude(remaining=0))


def fault_answer(*, rules: list[FaultRule], stage: str, address: str = "") -> FaultAnswer | None:
    """The answer the first rule of `stage` that matches `address` gives, its probability
    drawn and one of its `times` spent (once across every process: the UPDATE is the
    count), or None: the command goes on as without faults."""
    address = address.lower()
    for rule in rules:
        if rule.stage != stage or (rule.match and not fnmatch.fnmatchcase(address, rule.match)):
            continue
        if rule.probability < 1 and random.random() >= rule.probability:
            continue
        if rule.times is not None and not FaultRule.objects.filter(id=rule.id, remaining__gt=0).update(
                remaining=F("remaining") - 1):
            continue  # spent, here or by another process
        return FaultAnswer(reply=_reply(rule), delay_seconds=rule.delay_seconds)
    return None


def _reply(rule: FaultRule) -> str:
    text = rule.message or "Fault answered by this sandbox's rules"
    return f"{rule.code} {rule.code // 100}.0.0 {text}"
