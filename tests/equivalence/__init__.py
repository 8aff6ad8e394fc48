"""The before/after equivalence record of issue 36 (``record.py`` writes ``reference.json.gz``;
``tests/test_refactor_equivalence.py`` compares a fresh run with it)."""
