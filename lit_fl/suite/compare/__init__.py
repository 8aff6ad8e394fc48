"""``lit-fl compare``: runs grouped into configurations (seeds pooled), a results table, an HTML dashboard and
PNG figures."""
