"""Message checks (docs/checks.md): whether a received mail's HTML renders in the email
clients, whether its links answer, whether SpamAssassin calls it spam, and whether its
headers meet what bulk-mail receivers require."""
