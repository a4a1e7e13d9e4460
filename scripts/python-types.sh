#!/usr/bin/env bash
# Regenerates the Python client's types (client/relay_client/types.py) from Relay's OpenAPI
# schema with scripts/python_types.py; tests/test_client.py fails when they differ.
set -euo pipefail
cd "$(dirname "$0")/.."
schema=$(mktemp --suffix=.json)
trap 'rm -f "$schema"' EXIT
# The settings scripts/typescript-types.sh uses, so both clients read the same schema; nothing connects.
env DATABASE_URL=postgres://relay@127.0.0.1:5432/relay RELAY_ENV_FILE=/dev/null DJANGO_DEBUG=false \
  DJANGO_SECRET_KEY=schema-only-not-a-secret-0123456789abcdefghijklmnopqrstuvwxyz \
  .venv/bin/python manage.py spectacular --format openapi-json --file "$schema"
.venv/bin/python scripts/python_types.py "$schema" client/relay_client/types.py
