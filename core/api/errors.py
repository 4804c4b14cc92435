"""The error bodies: OpenAI's ``{"error": {"message", "type", "param", "code"}}`` and, for
``/v1/messages/batches``, Anthropic's ``{"type": "error", "error": {"type", "message"}}``."""

from __future__ import annotations

from starlette.responses import JSONResponse

# OpenAI's error types by HTTP status.
_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "insufficient_quota",  # a quota (core/jobs/quotas.py), as OpenAI's own 429 says
    500: "server_error",
    507: "server_error",
}


class ApiError(Exception):
    """A request the API refuses, with what to fix.

    Attributes:
        status: the HTTP status (400, 401, 404...).
        message: a sentence that says what to fix.
        param: the parameter at fault, where there is one.
        code: OpenAI's error code, where it has one (``invalid_api_key``...).
    """

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.param, self.code)


def error_response(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> JSONResponse:
    body = {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "invalid_request_error"),
            "param": param,
            "code": code,
        }
    }
    # The pinned SDKs retry a 5xx (and send an upload again each time); no answer here
    # changes when the same request comes again, so they are told not to.
    return JSONResponse(body, status_code=status, headers={"x-should-retry": "false"})


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, f"No {what} with id {ident!r} (or it is not yours).", code="not_found")


# Anthropic's error types by HTTP status (those its SDK's ErrorObject knows).
_ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def anthropic_error(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> JSONResponse:
    """Anthropic's error body (it has no ``param`` nor ``code``: the message names the
    field); a 5xx is ``api_error``, any other 4xx ``invalid_request_error``."""
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JSONResponse(body, status_code=status, headers={"x-should-retry": "false"})
