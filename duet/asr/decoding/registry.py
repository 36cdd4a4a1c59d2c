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
    """The validated settings of ``strategy`` with ``values``: a value the strategy does not read, or a bad one, is a
    ``DecodingInputError`` naming it as ``name_of`` spells it (a flag, a file key), the strategy as ``strategy_as``
    (what ``name_of("strategy")`` gives the strategy's own checks)."""
    cls = strategy_class(strategy, strategy_as)
    ignored = [name for name in values if name not in options_of(cls)]
    if ignored:
        raise DecodingInputError(f"{', '.join(name_of(n) for n in ignored)} not used by {strategy_as} {strategy}")
    return cls(**values).validate(lambda name: strategy_as if name == "strategy" else name_of(name))
