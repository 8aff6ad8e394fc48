"""``data.proxy``: the config section of the server's unlabeled public (proxy) data; what it builds is
:mod:`lit_fl.data.proxy`. Kept apart from it so that checking a config (jsonargparse reads this module's annotations)
never imports torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lit_fl.constraints import PositiveInt, check_fields
from lit_fl.data.options import check_options
from lit_fl.errors import ConfigError

#: the stream of the partition seed the proxy sample is drawn from (0: partition, 6: hold-out, 7: client init)
PROXY_STREAM = 8


@dataclass
class ProxyConfig:
    """Unlabeled public data on the server (``data.proxy``).

    Args:
        dataset: a registered dataset whose train split (inputs only) is the proxy, or ``module:loader`` of your
            own; null = the held-out slice of the federation's own train split (``data.server_fraction``).
        size: proxy samples drawn from the source by the partition seed, without replacement; null = all of them.
        options: extra keyword arguments of the proxy dataset's loader.
    """

    dataset: str | None = None
    size: PositiveInt | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from lit_fl.data.registry import check_dataset_name
        from lit_fl.user_code import is_user_spec, load_object

        check_fields(self, "data.proxy.")
        if self.dataset is None:
            return
        if is_user_spec(self.dataset):
            load_object(self.dataset, "data.proxy.dataset")
        else:
            check_dataset_name(self.dataset, "data.proxy.dataset", " (or module:loader of your own, or null for the "
                               "held-out slice of data.server_fraction)")


def as_proxy_config(value: ProxyConfig | dict[str, Any] | None) -> ProxyConfig:
    """``data.proxy`` as a :class:`ProxyConfig` (a mapping from Python or YAML, or None for the default)."""
    if value is None:
        return ProxyConfig()
    if isinstance(value, ProxyConfig):
        return value
    if isinstance(value, dict):
        check_options("", ProxyConfig, value, key="data.proxy")
        return ProxyConfig(**value)
    raise ConfigError(f"data.proxy: expected a mapping {{dataset, size, options}}, got {value!r}")
