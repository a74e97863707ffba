"""The one door to the MLflow store: the only modules that import mlflow, use MlflowClient or open
MLflow's SQLite file (tests/repository/test_import_rules.py holds it). connect: checking a URI and opening a
client; recorder: writing runs; derived, view, attach: the report's figures, saved view and files;
search, runs, reading, history: reading runs back through one search loop and one flattener."""
