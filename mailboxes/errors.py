"""Relay's error format: {"code", "message"} plus "fields" for validation errors.

Every error a client can cause goes through here, DRF's and Django's alike, so no
request ever sees an HTML page or a 500 for bad input."""

from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.views import exception_handler as drf_exception_handler



class ApiError(exceptions.APIException):
    """An error with Relay's own code."""

    def __init__(self, message: str | None = None):
        super().__init__(detail=message or self.default_detail)


class Conflict(ApiError):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "That address has already been used."


class Expired(ApiError):
    status_code = status.HTTP_410_GONE
    default_code = "expired"
    default_detail = "Mailbox has expired"


class BackendUnavailable(ApiError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "backend_unavailable"
    default_detail = "The mail backend could not provision the mailbox; try again later."


CODES = {
    exceptions.ValidationError: "invalid_request",
    exceptions.ParseError: "invalid_request",
    exceptions.UnsupportedMediaType: "invalid_request",
    exceptions.AuthenticationFailed: "unauthorized",
    exceptions.NotAuthenticated: "unauthorized",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.Throttled: "rate_limited",
}


def _code(exc: exceptions.APIException) -> str:
    if isinstance(exc, ApiError):
        return exc.default_code
    for exc_type, code in CODES.items():
        if isinstance(exc, exc_type):
            return code
    return "error"


def _first_message(detail) -> str:
    if isinstance(detail, dict):
        for value in detail.values():
            return _first_message(value)
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return str(detail)


def exception_handler(exc, context):
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("Not found.")
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a real bug: let Django log it and answer 500
    body = {"code": _code(exc), "message": _first_message(exc.detail)}
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        body["fields"] = {name: [str(m) for m in (msgs if isinstance(msgs, list) else [msgs])] for name, msgs in detail.items()}
        body["message"] = "The request is not valid."
    elif isinstance(exc, exceptions.NotFound):
        body["message"] = "Not found."
    response.data = body
    return response


# Django's own 4xx pages (unknown routes, oversize bodies) are turned into this format by
# mailboxes.middleware.JsonErrorsMiddleware, in DEBUG too; only a bug's 500 needs a view.
def server_error(request):
    return JsonResponse({"code": "server_error", "message": "Something went wrong on our side; it has been logged."},
                        status=500)
