"""Beat's scheduler: django-celery-beat's, with a stored last run ahead of this beat's clock
taken as due now (docs/architecture.md, "One clock")."""
from celery import schedules
from celery.utils.time import maybe_make_aware
from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry, logger


class ClockSafeEntry(ModelEntry):

    def is_due(self):
        now = maybe_make_aware(self._default_now())
        last = maybe_make_aware(self.last_run_at) if self.last_run_at is not None else None
        if last is not None and last > now:
            ahead = last - now
            interval = type(self.schedule) is schedules.schedule
            taken = now - self.schedule.run_every if interval else now
            self.last_run_at = self.model.last_run_at = taken
            logger.warning("%s: its last run is stored %.0f s ahead of this beat's clock; taken as %s",
                           self.name, ahead.total_seconds(), "due now" if interval else "run now")
        return super().is_due()


class ClockSafeScheduler(DatabaseScheduler):
    Entry = ClockSafeEntry
