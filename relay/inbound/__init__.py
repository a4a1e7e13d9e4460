"""Mail in: the SMTP server (server.py) and attachments read back (attachments.py); what it
accepts is taken in by relay/ingest.py."""
