"""A sweep's report: tables, plots and Markdown from the store (tracking/store/), built by build.py,
`python -m tracking.report` in __main__.py; figures/ holds what the tables judge by."""
