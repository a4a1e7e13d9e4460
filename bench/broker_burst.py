"""The expiry burst on both production brokers in one run: N due mailboxes cleaned up by
2 workers and a beat on Redis, then on RabbitMQ (local backend). Prints cleanups per
second on each and RabbitMQ's ratio to Redis.

    scripts/bench.sh broker_burst [--mailboxes 20000] [--rabbitmq amqp://guest:guest@127.0.0.1:5672//]
"""
import argparse

from bench.common import command_line, fresh_database, record, setup_django
from bench.expiry_burst import relay_burst


def purge(url: str) -> None:
    import kombu

    with kombu.Connection(url, connect_timeout=5) as connection, connection.channel() as channel:
        for queue in ("celery", "sweep"):
            try:
                channel.queue_purge(queue)
            except connection.channel_errors:
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mailboxes", type=int, default=20_000)
    parser.add_argument("--rabbitmq", default="amqp://guest:guest@127.0.0.1:5672//")
    args = parser.parse_args()
    fresh_database()
    setup_django()
    import redis
    from django.conf import settings

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    # No API reads: this process publishes to Redis, so a read's lazy expiry on the
    # RabbitMQ run would queue its cleanup where no worker listens.
    on_redis = relay_burst(args.mailboxes, broker, backend="local", latency_ms=0, second=0, read_sample=False)
    purge(args.rabbitmq)
    # On RabbitMQ the workers keep Redis for the cache and the events, as a deployment with
    # both would; only the broker changes.
    on_rabbitmq = relay_burst(args.mailboxes, broker, backend="local", latency_ms=0, second=0,
                              env={"CELERY_BROKER_URL": args.rabbitmq, "CACHE_URL": settings.CELERY_BROKER_URL.replace(
                                  "redis://", "rediscache://", 1)}, read_sample=False)
    figures = (f"{args.mailboxes:,} mailboxes, local backend: Redis {on_redis['per_second']:.0f} cleaned/s, "
               f"RabbitMQ {on_rabbitmq['per_second']:.0f} cleaned/s = ratio **"
               f"{on_rabbitmq['per_second'] / on_redis['per_second']:.2f}**; worker RSS after: Redis "
               f"{on_redis['rss_after_mb']:.0f} MiB, RabbitMQ {on_rabbitmq['rss_after_mb']:.0f} MiB")
    record("broker_burst", command_line(), figures)


if __name__ == "__main__":
    main()
