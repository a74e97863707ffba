"""The one loop that pages through a search of the store: a sweep's runs number in the thousands,
past one page of MLflow's `search_runs`."""

from __future__ import annotations

PAGE = 5000


def search(client, experiment_id: str, filter_string: str, order_by: list[str] | None = None) -> list:
    """Every run of the experiment the filter matches, page by page."""
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string=filter_string, max_results=PAGE, order_by=order_by, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs
