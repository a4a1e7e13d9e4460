"""The names of the Celery tasks that modules send without importing them (a task's
module imports the services that send it, so they name it instead), in one table:
expiry's cleanups and schedules, the outbox's mailer, storing's owed words, webhook
deliveries and link checks all send by these names. tests/test_layers.py checks that each
is a task the Celery app has, and that no module spells one out itself."""

EXPIRE_MAILBOX = "expiry.tasks.expire_mailbox"
EXPIRE_MAILBOXES = "expiry.tasks.expire_mailboxes"
SWEEP = "expiry.tasks.sweep"
PURGE_RETAINED = "expiry.tasks.purge_retained"
SWEEP_WEBHOOK_DELIVERIES = "webhooks.tasks.sweep_deliveries"
DELIVER_WEBHOOK = "webhooks.tasks.deliver_webhook"
INDEX_OWED_WORDS = "relay.tasks.index_owed_words"
READ_MAIL_SERVER = "relay.tasks.read_mail_server"
RECONCILE_REPORT = "relay.tasks.reconcile_report"
SEND_OUTBOX_BATCH = "relay.tasks.send_outbox_batch"
CHECK_LINKS = "checks.tasks.check_links"

ALL = (EXPIRE_MAILBOX, EXPIRE_MAILBOXES, SWEEP, PURGE_RETAINED, SWEEP_WEBHOOK_DELIVERIES, DELIVER_WEBHOOK,
       INDEX_OWED_WORDS, READ_MAIL_SERVER, RECONCILE_REPORT, SEND_OUTBOX_BATCH, CHECK_LINKS)
