"""Pure rules with one home: read by the CLI and by the roles' filter plugins (which run on the
controller, where this package is installed beside ansible-core). Stdlib only, and nothing else of
ours: a rule written twice drifts (tests/unit/test_layering.py keeps this package a leaf)."""
