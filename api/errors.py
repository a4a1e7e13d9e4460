"""Relay's error format: {"code", "message"} plus "fields" for validation errors.

One vocabulary for every error a client can meet: the domain's exceptions, DRF's and
Django's. Each domain exception has its status and code in relay.error_table, the one
table every door reads; everything else is known by its HTTP status, by the same table's
STATUS_CODES (the DRF exception handler here, and api.middleware for what Django answers
before any view runs). So no request ever sees an HTML page or a 500 for bad input."""
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from api.authentication import InsufficientScope, insufficient_scope
from core.pools import PoolFull
from mailboxes import errors as domain
from relay.error_table import domain_error, error_body

MESSAGES = {
    404: "Not found.",
    413: "The request body is too large.",
}


def _first_message(detail) -> str:
    if isinstance(detail, dict):
        for value in detail.values():
            return _first_message(value)
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return str(detail)


def _messages(value) -> list[str]:
    """A field's messages as plain strings, however deeply DRF nested them (a list
    field's errors come as {index: [ErrorDetail]}): no Python repr reaches a client."""
    if isinstance(value, dict):
        return [f"item {key}: {message}" for key, item in value.items() for message in _messages(item)]
    if isinstance(value, list):
        return [message for item in value for message in _messages(item)]
    return [str(value)]


def _domain_response(exc: domain.RelayError) -> Response:
    status_code, body = domain_error(exc)
    response = Response(body, status=status_code)
    if getattr(exc, "retry_after", None):  # a quota, a rate, a kind of outside call's full pool
        response["Retry-After"] = str(exc.retry_after)
    return response


def _validation_body(exc: exceptions.ValidationError) -> dict:
    detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
    return error_body(400, "The request is not valid.",
                      fields={name: _messages(messages) for name, messages in detail.items()})


def error_of(exc: domain.RelayError | exceptions.APIException | PoolFull) -> tuple[int, dict]:
    """The status and body of an error a caller caused, whatever door it came by: a
    domain error, a serializer's validation error, DRF's refusal of credentials, or a
    kind of outside call's full pool. The MCP tools word their tool errors from the same body."""
    if isinstance(exc, domain.RelayError):
        return domain_error(exc)
    if isinstance(exc, PoolFull):
        return 503, error_body(503, exc.message)
    if isinstance(exc, exceptions.ValidationError):
        return 400, _validation_body(exc)
    message = MESSAGES.get(exc.status_code) or _first_message(exc.detail)
    return exc.status_code, error_body(exc.status_code, message)


def json_error_response(exc) -> JsonResponse:
    """The same error body for the async views, which DRF does not run: a domain error
    or a DRF validation error as a plain JsonResponse."""
    status_code, body = error_of(exc)
    response = JsonResponse(body, status=status_code)
    if getattr(exc, "retry_after", None):
        response["Retry-After"] = str(exc.retry_after)
    return response


def exception_handler(exc, context):
    if isinstance(exc, domain.RelayError):
        return _domain_response(exc)
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body(413, MESSAGES[413]), status=413)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a real bug: let Django log it and answer 500
    if isinstance(exc, exceptions.ValidationError):
        response.data = _validation_body(exc)
    else:
        message = MESSAGES.get(response.status_code) or _first_message(exc.detail)
        response.data = error_body(response.status_code, message)
    if isinstance(exc, InsufficientScope):
        response["WWW-Authenticate"] = insufficient_scope(exc.scope)
    return response


def server_error(request):
    return JsonResponse(error_body(500, "Something went wrong on our side; it has been logged.", code="server_error"),
                        status=500)
