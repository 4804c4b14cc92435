"""An uploaded file's bytes, let go once the file is on disk."""

from __future__ import annotations

from typing import Any


def forget_upload(uploaded: Any) -> None:
    """Drops Streamlit's in-memory copy of an uploaded file once it is saved to disk.

    Streamlit keeps each upload's bytes in the server's memory for the whole session (300
    MB kept about 900 MB): in its upload manager and in the widget's values. The manager's
    copy goes here (as Streamlit's own chat input does with its files) and the value given
    to the page is closed; the widget's own copy of its value goes with the widget, which
    the page then replaces by a new one (pages/upload.py).
    """
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    manager = getattr(ctx, "uploaded_file_mgr", None)
    if isinstance(manager, MemoryUploadedFileManager):
        manager.remove_file(session_id=ctx.session_id, file_id=uploaded.file_id)
    uploaded.close()
