"""What each domain error answers at a web door, the API's routes, its MCP tools and the web
inbox's pages alike: a status, a code and the error body {"code", "message"} plus "fields"
(docs/api.md, "Errors"). The domain raises plain exceptions (accounts/errors.py,
mailboxes/errors.py); this is their one table, below every door, so no door maps them
itself. DRF's own errors are api/errors.py's."""
from mailboxes import errors as domain

# The code of every status Relay answers with, whoever raised it.
STATUS_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    410: "expired",
    413: "too_large",
    415: "unsupported_media_type",
    422: "suppressed",
    429: "rate_limited",
    503: "backend_unavailable",
}

# The domain's exceptions, each with its status; the code follows from the status.
DOMAIN_ERRORS = {
    domain.InvalidRequest: 400,
    domain.NotFound: 404,
    domain.Conflict: 409,
    domain.Gone: 410,
    domain.BackendUnavailable: 503,
    domain.Forbidden: 403,
    domain.QuotaExceeded: 429,
    domain.RateLimited: 429,
    domain.MessageTooLarge: 413,
    domain.Suppressed: 422,
}
# Where a status has more than one code (docs/api.md: 429 is rate_limited or quota_exceeded;
# 403 is forbidden or account_suspended; 404 is not_found or not_configured).
DOMAIN_CODES = {domain.QuotaExceeded: "quota_exceeded", domain.AccountSuspended: "account_suspended",
                domain.NotConfigured: "not_configured"}


def error_body(status_code: int, message: str, *, code: str | None = None, fields: dict | None = None) -> dict:
    body = {"code": code or STATUS_CODES.get(status_code, "invalid_request"), "message": message}
    if fields:
        body["fields"] = fields
    return body


def domain_error(exc: domain.RelayError) -> tuple[int, dict]:
    """The status and body of a domain error."""
    status_code = next((code for cls, code in DOMAIN_ERRORS.items() if isinstance(exc, cls)), 400)
    fields = {exc.field: [exc.message]} if isinstance(exc, domain.InvalidRequest) and exc.field else None
    code = next((code for cls, code in DOMAIN_CODES.items() if isinstance(exc, cls)), None)
    return status_code, error_body(status_code, exc.message, code=code, fields=fields)


def retry_after(exc: domain.RelayError) -> int | None:
    """Seconds a refused caller should wait before trying again (Retry-After), if said."""
    return exc.retry_after if isinstance(exc, (domain.QuotaExceeded, domain.RateLimited)) else None
