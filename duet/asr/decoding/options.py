"""The one schema of the decoding settings: each strategy's frozen dataclass declares its fields with :func:`option`
(default, bounds, help), and everything else is derived from those declarations — the command-line flags and their
help (``duet.cli.cli_args``), the ``decoding.json`` keys (``duet.asr.decoding.file``), the checks and their messages.

A field's flag is ``--`` and its name with dashes, its file key its name, unless the option says otherwise. A check
names the item as the caller knows it (``name_of``: the flag, the file's key, a request's field), so a bad value is
one line that says where it came from.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, ClassVar

from duet.errors import DuetError


class DecodingInputError(DuetError, ValueError):
    """Bad decoding settings (a value out of range, a missing LM file, an LM built for another tokenizer): one line
    naming the item, no stack trace."""


@dataclass(frozen=True)
class Option:
    """What a decoding setting is, beside its default: its help line and the values it allows."""

    help: str
    low: float | None = None  # the smallest value allowed
    high: float | None = None  # the largest value allowed
    flag: str | None = None  # the command-line flag (default: --<name-with-dashes>)
    key: str | None = None  # the decoding.json key (default: the name)
    path: bool = False  # a file (decoding.json keeps it relative to its own folder)


def option(default, help: str, **kwargs):
    """A settings field with its :class:`Option` (keyword arguments as there)."""
    return dataclasses.field(default=default, metadata={"option": Option(help, **kwargs)})


#: How a check names a field: the caller's spelling of it (a flag, a file key); by default the field's own name
NameOf = Callable[[str], str]


def plain_name(name: str) -> str:
    return name


def options_of(cls) -> dict[str, tuple[dataclasses.Field, Option]]:
    """The decoding options of a settings class (or instance), in declaration order."""
    return {f.name: (f, f.metadata["option"]) for f in dataclasses.fields(cls) if "option" in f.metadata}


def flag_of(name: str, opt: Option) -> str:
    return opt.flag or "--" + name.replace("_", "-")


def key_of(name: str, opt: Option) -> str:
    return opt.key or name


def kind_of(f: dataclasses.Field, opt: Option) -> type:
    """The type a value of the field must have: str for a path, else its default's (int or float)."""
    return str if opt.path else type(f.default)


def check_value(name: str, value, f: dataclasses.Field, opt: Option, name_of: NameOf = plain_name) -> None:
    """A ``DecodingInputError`` naming ``name_of(name)`` unless ``value`` is of the field's kind and within its
    bounds (None is allowed where the default is None)."""
    kind = kind_of(f, opt)
    if value is None and f.default is None:
        return
    number = kind in (int, float)
    ok = isinstance(value, (int, float) if kind is float else kind) and not isinstance(value, bool)
    ok = ok and (not number or math.isfinite(value))
    ok = ok and (opt.low is None or value >= opt.low) and (opt.high is None or value <= opt.high)
    if not ok:
        raise DecodingInputError(f"{name_of(name)} must be {describe_rule(kind, opt)}, got {value!r}")


def describe_rule(kind: type, opt: Option) -> str:
    if kind is str:
        return "a path"
    what = "an integer" if kind is int else "a finite number"
    if opt.low is not None and opt.high is not None:
        return f"{what} in {opt.low:g}..{opt.high:g}"
    if opt.low is not None:
        return f"{what} >= {opt.low:g}"
    if opt.high is not None:
        return f"{what} <= {opt.high:g}"
    return what


@dataclass(frozen=True)
class StrategySettings:
    """The settings of one decoding strategy (a subclass per strategy, registered with
    ``duet.asr.decoding.register``): its fields are its options."""

    strategy: ClassVar[str]
    #: one line for the strategy flag's help
    summary: ClassVar[str] = ""

    @classmethod
    def from_values(cls, values: dict, name_of: NameOf = plain_name,
                    strategy_as: str = "strategy") -> "StrategySettings":
        """These settings with ``values`` (field name -> value), validated: a value the strategy does not read, or a
        bad one, is a ``DecodingInputError`` naming it as ``name_of`` spells it (a flag, a file key), the strategy as
        ``strategy_as`` (what ``name_of("strategy")`` gives the strategy's own checks)."""
        ignored = [name for name in values if name not in options_of(cls)]
        if ignored:
            raise DecodingInputError(f"{', '.join(name_of(n) for n in ignored)} not used by {strategy_as} "
                                     f"{cls.strategy}")
        return cls(**values).validate(lambda name: strategy_as if name == "strategy" else name_of(name))

    def validate(self, name_of: NameOf = plain_name) -> "StrategySettings":
        """Every field checked against its option, then the strategy's own rules (:meth:`check`); returns self."""
        for name, (f, opt) in options_of(self).items():
            check_value(name, getattr(self, name), f, opt, name_of)
        self.check(name_of)
        return self

    def check(self, name_of: NameOf) -> None:
        """Rules between fields (e.g. an LM weight needs an LM), naming them (and the strategy, ``"strategy"``) as
        ``name_of`` spells them; none by default."""

    def used_values(self) -> dict:
        """The values of this strategy's options, by field name."""
        return {name: getattr(self, name) for name in options_of(self)}

    def command_line(self, strategy_flag: str = "--decoding") -> list[str]:
        """The options of a decoding script (``duet.cli.cli_args.add_decoding_arguments``) that give these settings:
        the strategy and each value, for a command another process runs (a path option unset is left out)."""
        args = [f"{strategy_flag}={self.strategy}"]
        for name, (_, opt) in options_of(self).items():
            value = getattr(self, name)
            if value is not None:
                # --flag=value: a negative number or a path starting with "-" is still read as the flag's value;
                # str: a float as it round-trips
                args.append(f"{flag_of(name, opt)}={value}")
        return args

    def describe(self) -> str:
        """A short description for logs and results, e.g. ``beam8+LM(a=1.1,b=4)``."""
        return self.strategy

    def build(self, model, reuse=None):
        """The decoder of these settings for ``model`` (:class:`duet.asr.decoding.decoder.CtcDecoder`); ``reuse``:
        a decoder built before, whose loaded parts (Whisper's models) may be taken over."""
        raise NotImplementedError
