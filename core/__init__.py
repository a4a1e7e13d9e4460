"""The ground floor: what every app uses and no domain owns (docs/architecture.md).

The database's clock (`core.clock`), the storage seam: every difference between PostgreSQL
and SQLite, prepared statements among them (`core.storage`), Redis clients
(`core.redis_clients`), the DNS resolver (`core.dns`), the address-guarded HTTP client
(`core.http`), the web process's thread pools (`core.pools`), a client's address
(`core.client_address`), the names of tasks sent by name (`core.task_names`) and every
beat schedule (`core.schedules`). It imports no app of Relay's; every app may import it."""
