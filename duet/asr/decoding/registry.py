"""The strategies by name: a module that defines one registers its settings class (:func:`register`), and the
command line, ``decoding.json``, the pipeline, the server and the benches find it here."""

from __future__ import annotations

from duet.asr.decoding.options import DecodingInputError, NameOf, StrategySettings, options_of, plain_name

_STRATEGIES: dict[str, type[StrategySettings]] = {}


def register(cls: type[StrategySettings]) -> type[StrategySettings]:
    """Make ``cls`` (a frozen :class:`StrategySettings` dataclass with a ``strategy`` name) a decoding strategy."""
    _STRATEGIES[cls.strategy] = cls
    return cls


def strategies() -> tuple[str, ...]:
    """The names of the registered strategies, greedy first."""
    return tuple(_STRATEGIES)


def strategy_class(strategy: str, strategy_as: str = "strategy") -> type[StrategySettings]:
    """The settings class of ``strategy``; an unknown one is a ``DecodingInputError`` naming ``strategy_as``."""
    if strategy not in _STRATEGIES:
        raise DecodingInputError(f"{strategy_as} {strategy!r}: unknown decoding strategy; choose from "
                                 f"{', '.join(_STRATEGIES)}")
    return _STRATEGIES[strategy]


def all_options() -> dict[str, tuple]:
    """Every option of every strategy once, by field name: ``(field, Option, names of the strategies that read
    it)``, in registration order."""
    out: dict[str, tuple] = {}
    for name, cls in _STRATEGIES.items():
        for field_name, (f, opt) in options_of(cls).items():
            if field_name in out:
                out[field_name][2].append(name)
            else:
                out[field_name] = (f, opt, [name])
    return out


def decoding_settings(strategy: str = "greedy", /, **values) -> StrategySettings:
    """The validated settings of ``strategy`` with ``values`` (field name -> value); messages name the fields."""
    return settings_from_values(strategy, values)


def settings_from_values(strategy: str, values: dict, name_of: NameOf = plain_name,
                         strategy_as: str = "strategy") -> StrategySettings:
    """The validated settings of ``strategy`` with ``values`` (:meth:`StrategySettings.from_values`); an unknown
    strategy is a ``DecodingInputError`` naming ``strategy_as``."""
    return strategy_class(strategy, strategy_as).from_values(values, name_of, strategy_as)
