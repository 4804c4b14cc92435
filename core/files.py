"""Small file helpers every part shares: the one atomic write (of a file, or of a whole
folder), the one JSON reader beside it, and a file's SHA-256."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO


def write_atomic(path: Path, data: str | bytes | BinaryIO) -> None:
    """Writes a file so a reader sees the old content or the new, never half of either
    (see :func:`file_atomic`). ``data`` may be a binary stream, copied in blocks (an upload
    of gigabytes is not copied in memory first)."""
    with file_atomic(path) as out:
        if isinstance(data, str | bytes):
            out.write(data.encode("utf-8") if isinstance(data, str) else data)
        else:
            shutil.copyfileobj(data, out, 1 << 20)


def write_atomic_into(reserve: Path, path: Path, data: bytes) -> None:
    """Writes ``data`` into ``reserve`` (a file whose blocks are already allocated, so no
    new space is needed up to its size), then renames it over ``path``: an atomic write
    that works on a full disk. ``reserve`` is gone afterwards."""
    with reserve.open("r+b") as handle:
        handle.write(data)
        handle.truncate(len(data))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(reserve, path)


@contextmanager
def file_atomic(path: Path) -> Iterator[BinaryIO]:
    """Yields a binary handle to write a file through, so that it appears whole or not at
    all: a temporary file beside it (unique per writer, so two threads or processes never
    share one) is written, fsynced and renamed over ``path`` when the block ends without an
    error, and removed otherwise (for a writer fed as data arrives: an upload's stream)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@contextmanager
def folder_atomic(target: Path, complete: Callable[[Path], bool]) -> Iterator[Path]:
    """Fills a folder so that it appears whole or not at all.

    Yields a new folder beside ``target`` (unique per process) to fill; when the block ends
    without an error it is renamed over ``target``, unless ``complete(target)`` says that
    another process finished the same folder first (theirs is kept). It is removed in
    every other case, an error included.
    """
    target = Path(target)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        yield partial
        if not complete(target):
            shutil.rmtree(target, ignore_errors=True)
            os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def write_json_atomic(path: Path, data: Any) -> None:
    """:func:`write_atomic` of ``data`` as indented JSON (UTF-8, not escaped)."""
    write_atomic(path, json.dumps(data, ensure_ascii=False, indent=1))


class JsonUnreadable(ValueError):
    """A JSON file that is missing, cannot be read (permissions, a folder, a device
    error), is not UTF-8, or holds no valid JSON. ``reason`` says which, for a message."""

    def __init__(self, path: Path, reason: str, missing: bool = False) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason, self.missing = path, reason, missing


def load_json(path: Path) -> Any:
    """A JSON file's value, or :class:`JsonUnreadable` saying why there is none."""
    try:
        return json.loads(Path(path).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise JsonUnreadable(path, f"{Path(path).name} is missing", missing=True) from None
    except UnicodeDecodeError as exc:
        raise JsonUnreadable(path, f"not UTF-8 at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise JsonUnreadable(path, f"not valid JSON: {exc}") from None
    except OSError as exc:
        raise JsonUnreadable(path, f"cannot be read: {exc.strerror or exc}") from None


def read_json(path: Path, default: Any = None) -> Any:
    """A JSON file's value, or ``default`` when it has none (:func:`load_json`): for files
    that are caches or optional (a model's config, the measured speeds)."""
    try:
        return load_json(path)
    except JsonUnreadable:
        return default


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def odd_entry(path: Path, directory: bool = False) -> str | None:
    """Why the studio will not read or follow ``path``, or None: it is a regular file (a
    real directory where ``directory``), or nothing. The data folder holds only what the
    studio made; a symbolic link could lead out of it, and a FIFO or device blocks a reader.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        return f"{Path(path).name} is a symbolic link (not followed)"
    if stat.S_ISREG(mode) or (directory and stat.S_ISDIR(mode)):
        return None
    kind = (
        "a directory" if stat.S_ISDIR(mode)
        else "a named pipe (FIFO)" if stat.S_ISFIFO(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "a device"
    )  # fmt: skip
    return f"{Path(path).name} is {kind}, not a regular file (not read)"


def lines_before(path: Path, offset: int) -> int:
    """How many lines end before byte ``offset`` of ``path`` (read in blocks: for line
    numbers in messages and in the check's split of a large file)."""
    lines = 0
    with path.open("rb") as handle:
        while offset > 0:
            block = handle.read(min(offset, 1 << 24))
            if not block:
                break
            lines += block.count(b"\n")
            offset -= len(block)
    return lines
