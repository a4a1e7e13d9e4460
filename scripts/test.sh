#!/usr/bin/env bash
# Runs the test suite against real PostgreSQL and Redis (see services.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh

# The admin and docs screenshot tests drive Debian's Chromium; install it when missing
# and this user may (they skip, saying why, where it cannot be had).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing chromium and chromium-driver for the screenshot tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null \
      || echo "warning: could not install chromium; the screenshot tests will be skipped" >&2
  fi
fi

# The web inbox's browser tests run axe-core (the npm package) inside each page; it goes
# into var/axe-core from the npm registry (the tests skip, saying why, without it).
AXE_CORE_VERSION=4.14.1
if [ ! -f var/axe-core/node_modules/axe-core/axe.min.js ] && command -v npm >/dev/null; then
  echo "installing axe-core $AXE_CORE_VERSION into var/axe-core for the web inbox's accessibility tests" >&2
  mkdir -p var/axe-core
  npm install --prefix var/axe-core --no-audit --no-fund --save-exact --loglevel=error "axe-core@$AXE_CORE_VERSION" \
    >/dev/null || echo "warning: could not install axe-core; the accessibility checks will be skipped" >&2
fi

# The TypeScript client's tests (tests/test_client_typescript.py) compile and run it with its
# dev dependencies, installed from its lock file (npm's registry; no browser is downloaded),
# and again when the lock file is newer than what npm last installed from it.
if { [ ! -d clients/typescript/node_modules/typescript ] \
     || [ clients/typescript/package-lock.json -nt clients/typescript/node_modules/.package-lock.json ]; } \
   && command -v npm >/dev/null; then
  echo "installing the TypeScript client's dev dependencies into clients/typescript/node_modules" >&2
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix clients/typescript --no-audit --no-fund --loglevel=error \
    >/dev/null || echo "warning: could not install them; the TypeScript client's tests will be skipped" >&2
fi

# The mail-server tests run a Cyrus IMAP of their own (tests/cyrus_server.py); install
# Debian's when missing and this user may (they skip, saying why, where it cannot be had).
if [ ! -x /usr/lib/cyrus/bin/master ] || ! command -v saslpasswd2 >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing cyrus-imapd, cyrus-caldav and sasl2-bin for the mail-server tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      cyrus-imapd cyrus-caldav sasl2-bin) >/dev/null \
      || echo "warning: could not install Cyrus; the mail-server tests will be skipped" >&2
  fi
fi

# The verdict and domain tests run a DNS server of their own (tests/dns_server.py: NSD),
# sign and check DKIM with an independent implementation (Perl's Mail::DKIM) and make
# keys with opendkim-genkey; install Debian's when missing and this user may (they skip,
# saying why, where they cannot be had).
if ! command -v nsd >/dev/null || ! command -v opendkim-genkey >/dev/null || ! perl -MMail::DKIM -e1 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing nsd, opendkim-tools and libmail-dkim-perl for the domain and verdict tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      nsd opendkim-tools libmail-dkim-perl) >/dev/null \
      || echo "warning: could not install NSD or the DKIM tools; the domain and verdict tests will be skipped" >&2
  fi
fi
# The conversation tests check Relay's replies with a threading implementation Relay does
# not contain (notmuch's); the several-hosts test runs processes in network namespaces
# (iproute2) with their clocks off (libfaketime).
if ! command -v notmuch >/dev/null || ! command -v faketime >/dev/null || ! command -v ip >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing notmuch, faketime and iproute2 for the conversation and several-hosts tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      notmuch faketime iproute2) >/dev/null \
      || echo "warning: could not install notmuch, faketime or iproute2; the tests needing them will be skipped" >&2
  fi
fi

# The message checks' spam tests run a spamd of their own (tests/spamd_server.py).
if ! command -v spamd >/dev/null && [ ! -x /usr/sbin/spamd ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # Debian 12 ships the daemon in a package of its own: spamassassin alone has no spamd.
    echo "installing spamassassin and spamd for the message checks' spam tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      spamassassin spamd) >/dev/null \
      || echo "warning: could not install spamassassin and spamd; the spam check tests will be skipped" >&2
  fi
fi

# The sandbox's tests submit mail with swaks as well as Python's smtplib (they skip, saying
# why, where it cannot be had).
if ! command -v swaks >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing swaks for the sandbox's submission tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends swaks) \
      >/dev/null || echo "warning: could not install swaks; the tests submitting with it will be skipped" >&2
  fi
fi

# The test process and every worker it starts read the same settings.
# RELAY_TEST_DATABASE names the database (its test copies are test_<name>…), so two checkouts
# can run their suites side by side on one PostgreSQL.
export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/${RELAY_TEST_DATABASE:-relay}"
export CELERY_BROKER_URL="redis://127.0.0.1:$REDIS_PORT/15"
export RELAY_BACKEND=local
# Shorter clocks than production, so the worker tests finish in seconds: a sweep every
# second, retries after 1, 2, 4 s, lapsed claims picked up after 4 s, Stalwart timeouts of 1 s.
export RELAY_SWEEP_INTERVAL_SECONDS=1 RELAY_CLEANUP_RETRY_BACKOFF_SECONDS=1 RELAY_CLEANUP_LEASE_SECONDS=4
export STALWART_CONNECT_TIMEOUT_SECONDS=1 STALWART_READ_TIMEOUT_SECONDS=1 RELAY_SEND_RETRY_BACKOFF_SECONDS=1
export RELAY_WEBHOOK_RETRY_BACKOFF_SECONDS=1 RELAY_WEBHOOK_RETRY_BACKOFF_MAX_SECONDS=4
# The Stalwart stand-in enforces no per-minute limit unless a test turns it on (and sets
# Relay's to match, tests/relay/backends/test_limiter.py); the worker tests make thousands of calls a minute.
export RELAY_BACKEND_MAX_PER_MINUTE=100000
mkdir -p var/static
export RELAY_ENV_FILE=/dev/null DJANGO_DEBUG=false DJANGO_SECRET_KEY=relay-test-secret-key-not-for-production-aZ0bY1cX2dW3eV4fU5
unset CACHE_URL EMAIL_URL STALWART_URL STALWART_TOKEN RELAY_DOMAINS CYRUS_IMAP_URL CYRUS_JMAP_URL CYRUS_ADMIN_USER CYRUS_ADMIN_PASSWORD \
  RELAY_DNS_RESOLVERS RELAY_DNS_TIMEOUT_SECONDS RELAY_MX_HOST RELAY_DKIM_SELECTOR RELAY_DKIM_PRIVATE_KEY_FILE \
  RELAY_AUTHSERV_ID RELAY_MAX_DOMAINS RELAY_SMTP_VERDICTS RELAY_SPAMD_URL RELAY_LINK_CHECK_ALLOW_PRIVATE
# Every process the suite starts (some 450: web, workers, beat, SMTP, manage.py) imports
# Relay's own modules. Compiled once here, each process reads them instead of compiling them
# again, even where the environment says not to write bytecode (PYTHONDONTWRITEBYTECODE):
# 0.1-0.3 s of CPU a web process on a slow machine (docs/testing.md). A file that does not
# compile is named here and left to the tests that import it. (var/ and clients/ hold npm's
# packages, not Relay's Python.)
$BIN/python -m compileall -q $(ls -d */ | grep -vxE 'var/|clients/') || true
# The web processes the suite starts serve static files as production does: collected.
$BIN/python manage.py collectstatic --noinput -v0
# As `python -m`: the checkout is on sys.path before pytest reads its plugins (tests/parallel.py).
exec $BIN/python -m pytest "$@"
