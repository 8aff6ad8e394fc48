"""System heterogeneity: every client's compute rate, link and availability (``system`` config section), and the
virtual clock that charges a round's work and transfers to them (docs/system.md)."""
