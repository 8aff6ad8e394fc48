"""Differential privacy: the ``privacy`` config section, its accounting (Google's ``dp-accounting``) and the
mechanisms: user-level DP-FedAvg on the server pipeline (:mod:`~lit_fl.privacy.user_level`), user-level DP on the
exchanges of decentralized methods (:mod:`~lit_fl.privacy.exchange`), and sample-level DP-SGD in the client phases
(:mod:`~lit_fl.steps.dp_sgd`, :mod:`~lit_fl.privacy.sample_level`). See docs/privacy.md for what each protects."""
