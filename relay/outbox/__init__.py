"""Mail out (docs/architecture.md, "Mail out"): every mail Relay sends is an outbox row
first, written in the transaction that causes it (sending.mail_queue): sends from a
mailbox (outbound.py) and the mails accounts cause (account_mail.py). The collector
(mailer.py, `manage.py runmailer`) claims them in batches, and a worker sends each batch
(sending.batch_send)."""
