"""The experiment suite above ``experiment``: W&B sweep files run locally (``lit-fl sweep``), their manifest,
and the comparison of runs (``lit-fl compare``: dashboard, figures, tables)."""
