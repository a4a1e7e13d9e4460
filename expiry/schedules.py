"""The beat schedules Relay needs, kept in django-celery-beat's tables.

Installed by a migration so a fresh deployment needs no manual step, and brought in line
with the settings after every `migrate` (a changed RELAY_SWEEP_INTERVAL_SECONDS takes
effect on the next deploy)."""
from django.conf import settings

SWEEP_TASK_NAME = "relay: expiry sweep"
PURGE_TASK_NAME = "relay: retention purge"
RECONCILE_TASK_NAME = "relay: reconcile report"
WORDS_TASK_NAME = "relay: owed search words"
# The backstop for search words whose task was lost (relay.inbound.storing.words_owed asks for one
# as messages arrive): a search never waits on it, it only bounds the owed backlog.
WORDS_BACKSTOP_SECONDS = 60

# (name, task, hour, minute) of the daily tasks, in UTC, spread apart.
DAILY = [
    (PURGE_TASK_NAME, "expiry.tasks.purge_retained", "3", "17"),
    (RECONCILE_TASK_NAME, "relay.tasks.reconcile_report", "4", "47"),
]


def install_schedules(apps=None) -> None:
    if apps is None:
        from django.apps import apps
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    CrontabSchedule = apps.get_model("django_celery_beat", "CrontabSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")

    every, _ = IntervalSchedule.objects.get_or_create(every=settings.RELAY_SWEEP_INTERVAL_SECONDS, period="seconds")
    PeriodicTask.objects.update_or_create(
        name=SWEEP_TASK_NAME,
        defaults={"task": "expiry.tasks.sweep", "interval": every, "crontab": None, "enabled": True,
                  "expire_seconds": settings.RELAY_SWEEP_INTERVAL_SECONDS * 2},
    )
    backstop, _ = IntervalSchedule.objects.get_or_create(every=WORDS_BACKSTOP_SECONDS, period="seconds")
    PeriodicTask.objects.update_or_create(
        name=WORDS_TASK_NAME,
        defaults={"task": "relay.tasks.index_owed_words", "interval": backstop, "crontab": None, "enabled": True,
                  "expire_seconds": WORDS_BACKSTOP_SECONDS},
    )
    for name, task, hour, minute in DAILY:
        daily, _ = CrontabSchedule.objects.get_or_create(minute=minute, hour=hour, day_of_week="*", day_of_month="*",
                                                         month_of_year="*", timezone="UTC")
        PeriodicTask.objects.update_or_create(
            name=name, defaults={"task": task, "crontab": daily, "interval": None, "enabled": True})
