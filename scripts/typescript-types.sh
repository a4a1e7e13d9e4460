#!/usr/bin/env bash
# Regenerates the TypeScript client's types (clients/typescript/src/schema.ts) from Relay's
# OpenAPI schema with openapi-typescript, and the compiled dist/ with them;
# tests/test_client_typescript.py fails when either differs.
set -euo pipefail
cd "$(dirname "$0")/.."
schema=$(mktemp --suffix=.json)
trap 'rm -f "$schema"' EXIT
# PostgreSQL's settings (its integer ranges are in the schema), as in production; nothing connects.
env DATABASE_URL=postgres://relay@127.0.0.1:5432/relay RELAY_ENV_FILE=/dev/null DJANGO_DEBUG=false \
  DJANGO_SECRET_KEY=schema-only-not-a-secret-0123456789abcdefghijklmnopqrstuvwxyz \
  .venv/bin/python manage.py spectacular --format openapi-json --file "$schema"
[ -d clients/typescript/node_modules ] || npm ci --prefix clients/typescript --no-audit --no-fund --loglevel=error
(cd clients/typescript && npx --no-install openapi-typescript "$schema" -o src/schema.ts)
# dist/ is checked in (an install builds nothing): compile it again from the new types.
(cd clients/typescript && npx --no-install tsc -p tsconfig.build.json)
