"""Planning, the sweep's first stage: the typed config, the settings checked before anything runs, the
grid expanded into trials, the fingerprints they would be measured with, and resume. Imports no later
stage (tests/repository/test_import_rules.py)."""
