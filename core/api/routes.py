"""The ``/v1`` routes: OpenAI's Files, Batches and Models endpoints, and Anthropic's
Message Batches (``/v1/messages/batches``), on the app's server.

Every answer is its API's shape; every refusal its API's error body with a status of 400,
401, 404, 413 (a JSON body past :data:`JSON_BODY_MAX`) or 507 (a full disk) and a sentence
that says what to fix, whatever the body, form or id holds.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from core.access import is_loopback
from core.api import batch_view, batches, files, message_batches, metrics
from core.api.errors import ApiError, anthropic_error, error_response, not_found
from core.api.form import too_large
from core.api.keys import Caller, KeyRefused, caller_for
from core.config import data_paths
from core.jobs.folder import JobUnreadable
from core.json_strict import strict_json
from core.model_folders import is_model_folder, model_folders
from core.model_names import read_names

log = logging.getLogger(__name__)
LIST_LIMIT_MAX = 100  # OpenAI's largest page of batches
FILES_LIMIT_MAX = 10_000
JSON_BODY_MAX = 1 << 20  # a batch request is a few hundred bytes; its lines go in a file
JSON_DEPTH_MAX = 64  # metadata, the deepest field a request has, nests two deep

Handler = Callable[[Request, Path, Caller | None], Awaitable[Response]]


def caller(request: Request, home: Path) -> Caller | None:
    """Who calls (:func:`core.api.keys.caller_for`): a stored key, or None for this
    machine's user.

    Raises:
        ApiError: 401, with why (:class:`core.api.keys.KeyRefused`).
    """
    host = request.client.host if request.client is not None else None
    # Anthropic's clients send the key as x-api-key; either header carries it, on any route.
    key = request.headers.get("x-api-key", "").strip()
    return caller_of(
        home, f"Bearer {key}" if key else request.headers.get("authorization", ""), host
    )


def caller_of(home: Path, authorization: str, host: str | None) -> Caller | None:
    """:func:`caller` from the ``Authorization`` header and the client's address.

    Raises:
        ApiError: 401, with why.
    """
    scheme, _, key = authorization.partition(" ")
    key = key.strip() if scheme.lower() == "bearer" else authorization.strip()
    try:
        return caller_for(home, key, is_loopback(host))
    except KeyRefused as exc:
        raise ApiError(401, str(exc), code="invalid_api_key") from None


def endpoint(
    handler: Handler, error: Callable[..., Response] = error_response
) -> Callable[[Request], Awaitable[Response]]:
    """Wraps a handler: the caller is known before it runs, and what goes wrong is an
    error in the API's shape (``error``: OpenAI's by default), never a traceback."""

    async def run(request: Request) -> Response:
        home = data_paths().home
        try:
            return await handler(request, home, caller(request, home))
        except ApiError as exc:
            return error(exc.status, exc.message, exc.param, exc.code)
        except ClientDisconnect:  # a cut request: nothing of it was kept, nobody to answer
            return error(400, "The request was cut off before it was read whole.")
        except Exception:  # the last net: logged for the operator, a plain 500 for the client
            log.exception("the API failed on %s %s", request.method, request.url.path)
            return error(500, "The server failed on this request; its log says why.")

    return run


def anthropic_endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """:func:`endpoint` for Anthropic's routes: its error body, and its version header
    required, as Anthropic requires it (its SDK always sends it)."""

    async def versioned(request: Request, home: Path, who: Caller | None) -> Response:
        if not request.headers.get("anthropic-version"):
            raise ApiError(400, "anthropic-version: header is required (e.g. 2023-06-01).")
        return await handler(request, home, who)

    return endpoint(versioned, anthropic_error)


def _limit(request: Request, default: int, most: int) -> int:
    raw = request.query_params.get("limit", str(default))
    try:
        limit = int(raw)
    except ValueError:
        raise ApiError(400, f"limit must be a whole number, not {raw[:20]!r}.", "limit") from None
    if not 1 <= limit <= most:
        raise ApiError(400, f"limit must be between 1 and {most}.", "limit")
    return limit


async def _json_body(request: Request) -> object:
    """The request's JSON, read only up to :data:`JSON_BODY_MAX` bytes: a longer body is
    refused by its Content-Length, or (chunked, or a length that lies) as soon as the bytes
    read pass the cap, before any is parsed.

    Raises:
        ApiError: 413 for a body over the cap, 400 for one that is not JSON or nests deeper
            than :data:`JSON_DEPTH_MAX`.
    """
    too_large = ApiError(
        413,
        f"The body is larger than the {JSON_BODY_MAX:,} bytes a JSON request may be here; "
        "a batch's lines go in an uploaded file (POST /v1/files).",
        code="request_too_large",
    )
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > JSON_BODY_MAX:
        raise too_large
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > JSON_BODY_MAX:
            raise too_large
    try:
        text = raw.decode("utf-8")
        return await run_in_threadpool(strict_json, text, max_depth=JSON_DEPTH_MAX)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(
            400, f"The body must be JSON (Content-Type: application/json): {exc}."
        ) from None


# -- files ---------------------------------------------------------------------------------


@endpoint
async def upload_file(request: Request, home: Path, who: Caller | None) -> Response:
    length, limit = request.headers.get("content-length", ""), files.max_upload_bytes()
    if length.isdigit() and int(length) > limit + files.FORM_OVERHEAD:
        raise too_large(limit)  # said before a byte is read; a chunked body is counted
    content_type = request.headers.get("content-type", "")
    record = await files.receive_upload(home, content_type, request.stream(), who)
    return JSONResponse(record.openai())


@endpoint
async def list_files(request: Request, home: Path, who: Caller | None) -> Response:
    def page() -> dict:
        records = files.listed_files(home, who)
        purpose = request.query_params.get("purpose")
        if purpose:
            records = [r for r in records if r.purpose == purpose]
        if request.query_params.get("order", "desc") == "asc":
            records.reverse()
        elif request.query_params.get("order", "desc") != "desc":
            raise ApiError(400, "order is 'asc' or 'desc'.", "order")
        after = request.query_params.get("after")
        if after is not None:
            ids = [r.id for r in records]
            if after not in ids:
                raise ApiError(400, f"'after' names no file you can see: {after[:60]!r}.", "after")
            records = records[ids.index(after) + 1 :]
        limit = _limit(request, FILES_LIMIT_MAX, FILES_LIMIT_MAX)
        shown = records[:limit]
        return {
            "object": "list",
            "data": [r.object() for r in shown],
            "first_id": shown[0].id if shown else None,
            "last_id": shown[-1].id if shown else None,
            "has_more": len(records) > limit,
        }

    return JSONResponse(await run_in_threadpool(page))


def _file(home: Path, file_id: str, who: Caller | None) -> tuple[dict, Callable]:
    """A file the caller may see: its ``FileObject`` and its content's line iterator."""
    record = files.read_record(home, file_id)
    if record is not None and files.visible(record.ownership(), who):
        path = files.content_path(home, file_id)

        def chunks():
            with path.open("rb") as handle:
                yield from iter(lambda: handle.read(1 << 16), b"")

        return record.openai(), chunks
    found = files.job_file(home / "jobs", file_id)
    if found is not None:
        job, kind = found
        try:
            owner = files.owner_of_job(job.read_spec())
        except JobUnreadable:  # that job's problem, named on the Jobs page
            raise not_found("file", file_id) from None
        if files.visible(owner, who):
            return files.job_file_object(job, kind), lambda: files.job_file_lines(job, kind)
    raise not_found("file", file_id)


@endpoint
async def get_file(request: Request, home: Path, who: Caller | None) -> Response:
    file_id = request.path_params["file_id"]
    obj, _ = await run_in_threadpool(_file, home, file_id, who)
    return JSONResponse(obj)


@endpoint
async def file_content(request: Request, home: Path, who: Caller | None) -> Response:
    file_id = request.path_params["file_id"]
    _, content = await run_in_threadpool(_file, home, file_id, who)
    # A sync iterator: Starlette reads it in a worker thread, a block at a time.
    return StreamingResponse(content(), media_type="application/jsonl")


@endpoint
async def delete_file(request: Request, home: Path, who: Caller | None) -> Response:
    file_id = request.path_params["file_id"]
    await run_in_threadpool(files.delete_upload, home, file_id, who)
    return JSONResponse({"id": file_id, "object": "file", "deleted": True})


# -- batches -------------------------------------------------------------------------------


@endpoint
async def create_batch(request: Request, home: Path, who: Caller | None) -> Response:
    body = await _json_body(request)
    return JSONResponse(await run_in_threadpool(batches.create_batch, home, body, who))


@endpoint
async def list_batches(request: Request, home: Path, who: Caller | None) -> Response:
    limit = _limit(request, 20, LIST_LIMIT_MAX)
    after = request.query_params.get("after")
    return JSONResponse(await run_in_threadpool(batches.list_batches, home, who, limit, after))


@endpoint
async def get_batch(request: Request, home: Path, who: Caller | None) -> Response:
    batch_id = request.path_params["batch_id"]
    # What every client polls: from memory while the job's files are unchanged (four lstat
    # calls; core/api/polls.py answers most before this), so it stays on the event loop; a
    # changed job is read in a worker thread.
    kept = batch_view.kept_body(home, batch_id, who)
    if kept is not None:
        return Response(kept, media_type="application/json")
    return JSONResponse(await run_in_threadpool(batches.get_batch, home, batch_id, who))


@endpoint
async def cancel_batch(request: Request, home: Path, who: Caller | None) -> Response:
    batch_id = request.path_params["batch_id"]
    return JSONResponse(await run_in_threadpool(batches.cancel_batch, home, batch_id, who))


# -- Anthropic's message batches ---------------------------------------------------------


def _base_url(request: Request) -> str:
    return str(request.base_url)


@anthropic_endpoint
async def create_message_batch(request: Request, home: Path, who: Caller | None) -> Response:
    body = await _json_body(request)
    made = await run_in_threadpool(message_batches.create, home, body, who, _base_url(request))
    return JSONResponse(made)


@anthropic_endpoint
async def list_message_batches(request: Request, home: Path, who: Caller | None) -> Response:
    query = request.query_params
    limit = _limit(request, 20, message_batches.LIST_LIMIT_MAX)
    page = await run_in_threadpool(
        message_batches.listing,
        home,
        who,
        _base_url(request),
        limit,
        query.get("before_id"),
        query.get("after_id"),
    )
    return JSONResponse(page)


@anthropic_endpoint
async def get_message_batch(request: Request, home: Path, who: Caller | None) -> Response:
    batch_id = request.path_params["batch_id"]
    found = await run_in_threadpool(message_batches.get, home, batch_id, who, _base_url(request))
    return JSONResponse(found)


@anthropic_endpoint
async def cancel_message_batch(request: Request, home: Path, who: Caller | None) -> Response:
    batch_id = request.path_params["batch_id"]
    base = _base_url(request)
    return JSONResponse(
        await run_in_threadpool(message_batches.cancel_batch, home, batch_id, who, base)
    )


@anthropic_endpoint
async def delete_message_batch(request: Request, home: Path, who: Caller | None) -> Response:
    batch_id = request.path_params["batch_id"]
    return JSONResponse(await run_in_threadpool(message_batches.delete, home, batch_id, who))


@anthropic_endpoint
async def message_batch_results(request: Request, home: Path, who: Caller | None) -> Response:
    batch_id = request.path_params["batch_id"]
    lines = await run_in_threadpool(message_batches.results, home, batch_id, who)
    # A sync iterator: Starlette reads it in a worker thread, a line at a time.
    return StreamingResponse(lines, media_type="application/binary")


@anthropic_endpoint
async def unknown_messages(request: Request, home: Path, who: Caller | None) -> Response:
    raise ApiError(
        404,
        f"Invalid URL ({request.method} {request.url.path}): this server answers "
        "/v1/messages/batches only of Anthropic's API.",
    )


# -- metrics -------------------------------------------------------------------------------


@endpoint
async def scrape(request: Request, home: Path, who: Caller | None) -> Response:
    """Prometheus' scrape (core/api/metrics.py), under the API's key rule."""
    text = await run_in_threadpool(metrics.exposition, data_paths().jobs, who)
    return Response(text, media_type=metrics.MEDIA_TYPE)


# -- models --------------------------------------------------------------------------------


def _model(name: str, folder: Path) -> dict:
    """A model as OpenAI's ``Model``: a model folder by its name, or a name mapped to one."""
    return {
        "id": name,
        "object": "model",
        "created": int(folder.stat().st_mtime),
        "owned_by": "batch-studio",
    }


def _models(home: Path) -> dict[str, dict]:
    """Every model a batch line may name: each model folder (embedding ones too) and each
    name mapped to one (core/model_names.py), by id."""
    found = {f.name: _model(f.name, f) for f in model_folders() if is_model_folder(f)}
    for name, folder in read_names(home).items():
        if is_model_folder(Path(folder)):
            found.setdefault(name, _model(name, Path(folder)))
    return found


@endpoint
async def list_models(request: Request, home: Path, who: Caller | None) -> Response:
    found = await run_in_threadpool(_models, home)
    return JSONResponse({"object": "list", "data": list(found.values())})


@endpoint
async def get_model(request: Request, home: Path, who: Caller | None) -> Response:
    name = request.path_params["model"]
    found = (await run_in_threadpool(_models, home)).get(name)
    if found is None:
        raise not_found("model", name)
    return JSONResponse(found)


@endpoint
async def unknown(request: Request, home: Path, who: Caller | None) -> Response:
    raise ApiError(
        404,
        f"Invalid URL ({request.method} {request.url.path}): this server answers /v1/files, "
        "/v1/batches and /v1/models.",
        code="unknown_url",
    )


ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def api_routes() -> list[BaseRoute]:
    """The routes to give ``st.App`` (server.py)."""
    return [
        Route("/v1/files", upload_file, methods=["POST"]),
        Route("/v1/files", list_files, methods=["GET"]),
        Route("/v1/files/{file_id}", get_file, methods=["GET"]),
        Route("/v1/files/{file_id}", delete_file, methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", file_content, methods=["GET"]),
        Route("/v1/batches", create_batch, methods=["POST"]),
        Route("/v1/batches", list_batches, methods=["GET"]),
        Route("/v1/batches/{batch_id}", get_batch, methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", cancel_batch, methods=["POST"]),
        Route("/v1/messages/batches", create_message_batch, methods=["POST"]),
        Route("/v1/messages/batches", list_message_batches, methods=["GET"]),
        Route("/v1/messages/batches/{batch_id}", get_message_batch, methods=["GET"]),
        Route("/v1/messages/batches/{batch_id}", delete_message_batch, methods=["DELETE"]),
        Route("/v1/messages/batches/{batch_id}/cancel", cancel_message_batch, methods=["POST"]),
        Route("/v1/messages/batches/{batch_id}/results", message_batch_results, methods=["GET"]),
        Route("/v1/messages", unknown_messages, methods=ALL_METHODS),
        Route("/v1/messages/{rest:path}", unknown_messages, methods=ALL_METHODS),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model}", get_model, methods=["GET"]),
        Route("/metrics", scrape, methods=["GET"]),
        # Anything else under /v1 (a wrong path or method) gets OpenAI's 404, not the page.
        Route("/v1", unknown, methods=ALL_METHODS),
        Route("/v1/{rest:path}", unknown, methods=ALL_METHODS),
    ]
