"""OpenAI's Files and Batches API, served by the studio's own server (``server.py``).

A client written for OpenAI's Batch API sets ``base_url`` to ``http://HOST:PORT/v1`` and
nothing else changes. The API holds no state of its own beyond uploaded files and the
batches refused at validation: a batch is a job made by the same ``submit()`` as every
other, and its state is read from the job folder (the truth on disk), never from DuckDB,
whose one writer is the app.

- :mod:`core.api.errors`: OpenAI's error body, for every refusal.
- :mod:`core.api.keys`: API keys (only their hashes are stored) and who may call.
- :mod:`core.api.files`: uploaded files, streamed to disk, and the files of jobs.
- :mod:`core.api.batches`: jobs as OpenAI batches; creating, listing, cancelling.
- :mod:`core.api.routes`: the Starlette routes under ``/v1``.
- :mod:`core.api.polls`: polls of an unchanged batch, answered ahead of the middleware.
- :mod:`core.api.media`: downloads (``/media``) need the pages' sign-in.
"""
