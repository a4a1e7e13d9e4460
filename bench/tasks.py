"""Tasks that only the benchmarks load (`celery worker -I bench.tasks`)."""
from celery import shared_task


@shared_task(acks_late=True)
def noop() -> None:
    """Celery's per-task floor: the baseline a cleanup is compared with."""


@shared_task(acks_late=True, soft_time_limit=3600, time_limit=3660)
def fan_out(count: int) -> None:
    """Publish `count` no-op tasks from a worker, as the sweep publishes expire tasks,
    then say so: the baseline is only done once all of them were published."""
    with noop.app.producer_or_acquire() as producer:
        for _ in range(count):
            noop.apply_async(producer=producer)
        producer.channel.client.set("bench:published", count)


@shared_task(acks_late=True)
def send_one_mail(to: list[str], subject: str, text: str, html: str) -> None:
    """The per-task baseline of the mailer benchmark: one mail, one task, sent with
    Django's send_mail, which opens and closes an SMTP connection for it."""
    from django.core.mail import send_mail

    send_mail(subject, text, None, to, html_message=html or None)
