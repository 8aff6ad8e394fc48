"""Differential privacy: the ``privacy`` config section, its accounting (Google's ``dp-accounting``) and the
user-level mechanism of the server pipeline (DP-FedAvg: per-client clipping, Gaussian noise on the sum). See
docs/privacy.md for what each mechanism protects."""
