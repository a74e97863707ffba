"""A report's place in the store: its files as artifacts of the sweep's parent run, and its overview as
that run's description in the MLflow UI."""

from __future__ import annotations

from pathlib import Path

MAX_NOTE_CHARS = 8000  # MLflow's limit on a tag's value
NOTE_TAG = "mlflow.note.content"  # the run's description, as the UI shows it


def attach_files(uri: str, parent_id: str, files: list[Path], folder: str = "report") -> None:
    """The files as artifacts of the run, under `folder`/."""
    from tracking.store.connect import open_client

    client = open_client(uri)
    for path in files:
        client.log_artifact(parent_id, str(path), folder)


def set_note(client, run_id: str, text: str) -> None:
    """The run's description, cut to what a tag holds."""
    client.set_tag(run_id, NOTE_TAG, text if len(text) <= MAX_NOTE_CHARS else text[:MAX_NOTE_CHARS - 20] + "\n\n(cut short)")
