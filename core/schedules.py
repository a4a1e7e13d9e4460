"""Every beat schedule Relay needs, by task name, installed by a migration and brought in
line with the settings after every `migrate` (expiry/apps.py). Whether the mail server's
poll runs is the backend's to say (relay.backends.keeps_accounts): the caller passes it."""
from django.conf import settings

from core import task_names

SWEEP_TASK_NAME = "relay: expiry sweep"
WEBHOOK_SWEEP_TASK_NAME = "relay: requeue lapsed webhook deliveries"
PURGE_TASK_NAME = "relay: retention purge"
RECONCILE_TASK_NAME = "relay: reconcile report"
WORDS_TASK_NAME = "relay: owed search words"
MAILSERVER_TASK_NAME = "relay: read the mail server"
# The backstop for search words whose task was lost (relay.ingest.words_index_request asks for one
# as messages arrive): a search never waits on it, it only bounds the owed backlog.
WORDS_BACKSTOP_SECONDS = 60


def every_few_seconds(*, read_mail_server: bool) -> list[tuple[str, str, int, bool]]:
    """(name, task, every so many seconds, enabled) of the interval tasks; their messages
    never expire, since a fast worker would drop every sweep."""
    sweep, poll = settings.RELAY_SWEEP_INTERVAL_SECONDS, settings.RELAY_MAILSERVER_POLL_SECONDS
    return [
        (SWEEP_TASK_NAME, task_names.SWEEP, sweep, True),
        (WEBHOOK_SWEEP_TASK_NAME, task_names.SWEEP_WEBHOOK_DELIVERIES, sweep, True),
        (WORDS_TASK_NAME, task_names.INDEX_OWED_WORDS, WORDS_BACKSTOP_SECONDS, True),
        (MAILSERVER_TASK_NAME, task_names.READ_MAIL_SERVER, poll, read_mail_server),
    ]


# (name, task, hour, minute) of the daily tasks, in UTC, spread apart.
DAILY = [
    (PURGE_TASK_NAME, task_names.PURGE_RETAINED, "3", "17"),
    (RECONCILE_TASK_NAME, task_names.RECONCILE_REPORT, "4", "47"),
]


def install_schedules(apps=None, *, read_mail_server: bool) -> None:
    if apps is None:
        from django.apps import apps
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    CrontabSchedule = apps.get_model("django_celery_beat", "CrontabSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")

    for name, task, seconds, enabled in every_few_seconds(read_mail_server=read_mail_server):
        every, _ = IntervalSchedule.objects.get_or_create(every=seconds, period="seconds")
        PeriodicTask.objects.update_or_create(name=name, defaults={
            "task": task, "interval": every, "crontab": None, "enabled": enabled, "expire_seconds": None,
            "expires": None})
    for name, task, hour, minute in DAILY:
        daily, _ = CrontabSchedule.objects.get_or_create(minute=minute, hour=hour, day_of_week="*", day_of_month="*",
                                                         month_of_year="*", timezone="UTC")
        PeriodicTask.objects.update_or_create(
            name=name, defaults={"task": task, "crontab": daily, "interval": None, "enabled": True})
