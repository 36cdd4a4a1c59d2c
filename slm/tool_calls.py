"""Tool calls in the language model's answers: what a model this small cannot work out itself (a sum, a unit or
temperature conversion, today's date) it writes as a call, and :func:`execute_calls` replaces each call with its
result before anyone sees the answer.

The one syntax, ``<<tool>>`` or ``<<tool: argument>>``, inside the answer's text::

    50 minus 3 is <<calc: 50 - 3>>.                                  -> 50 minus 3 is 47.
    64 degrees Celsius is about <<convert: 64 celsius -> fahrenheit>> degrees Fahrenheit.   -> ... about 147.2 ...
    There are about <<convert: 2 pounds -> grams>> grams in 2 pounds. -> ... about 907.18 grams ...
    It's <<time>>.  /  Today is <<date>>.                             -> It's 3:05 p.m.  /  Today is Sunday, December 6, 2026.
    Sorry, I can't <<request>>.    (asked "Could you book a table for me?")  -> Sorry, I can't book a table.

Tools (:data:`TOOLS`):

* ``calc``: arithmetic on numbers: ``+ - * / // % **``, parentheses, unary minus and ``sqrt(x)``, or ``X percent
  of Y`` alone (the words a request says: a model this small drops a ``/ 100`` it did not hear), evaluated by
  walking Python's syntax tree (never ``eval``) within bounds (:data:`LIMITS`): the argument's length, the tree's
  nodes and depth, every number's size and every exponent's, so no call can take long or grow a huge number.
* ``convert``: ``<number> <unit> -> <unit>``, one unit word each side as pint names it (``celsius``, ``fahrenheit``,
  ``miles``, ``kilograms``, ``cups``, ...), converted by ``pint``; the result is the number alone (the answer names
  the unit in words).
* ``time`` and ``date``: the machine's clock, no argument.
* ``request``: the user's request as the assistant repeats it (:func:`echo_request`: the polite frame dropped, "my"
  and "me" turned to "your" and "you"), no argument; refused for a question ("how do you say hello in french"),
  which is not an action to decline. A model this small copies words it never saw in training only
  in part ("take a picture" -> "take a pitch"); declining by this call, it only has to tell that it cannot do what
  was asked.

Results are written as :func:`format_number` writes numbers (two decimals at most, no trailing zeros). A call
that is unknown, malformed or refused, or text left with a stray ``<<`` / ``>>`` (an answer cut off mid-call),
turns the whole answer into :data:`FALLBACK`: a sentence with a blank where the number should be would mislead.
Every call, executed or refused, is recorded (:class:`ToolCall`: tool, input, result or error) beside the text.
"""

from __future__ import annotations

import ast
import logging
import math
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from functools import lru_cache
from typing import Callable

import pint

log = logging.getLogger(__name__)

#: ``<<tool>>`` or ``<<tool: argument>>``; the argument holds no ``<<`` or ``>>`` (a ``->`` is fine)
CALL = re.compile(r"<<\s*([A-Za-z_]+)\s*(?::((?:(?!<<|>>)[^\n])*))?>>")
FALLBACK = "Sorry, I couldn't work that out."
#: the answer that declines an action by name: the ``request`` tool repeats what was asked
DECLINE = "Sorry, I can't <<request>>."
#: the answer to a question the model cannot know (a fact it was not taught, live data)
UNKNOWN_ANSWER = "I don't know that."


@dataclass(frozen=True)
class Limits:
    """Bounds on what one ``calc`` call may ask: together they keep any call to microseconds and small numbers."""

    max_chars: int = 120  # the argument's length
    max_nodes: int = 60  # syntax tree nodes
    max_depth: int = 12  # nesting of the syntax tree
    max_abs: float = 1e15  # every literal, intermediate and result
    max_exponent: float = 64  # |b| in a ** b, checked before computing it


LIMITS = Limits()


class ToolError(ValueError):
    """A call that cannot be executed: unknown tool, malformed or refused argument, out of bounds."""


@dataclass(frozen=True)
class ToolCall:
    """One call found in an answer: ``result`` is the text spliced in, None when the call was refused (``error``)."""

    tool: str
    input: str
    result: str | None
    error: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ExecutedText:
    """An answer after its calls ran: the text shown to the user, the calls, and whether it fell back."""

    text: str
    calls: tuple[ToolCall, ...] = ()
    fell_back: bool = False
    #: the model's own answer when it was not shown: it held a token the model was unsure of
    #: (``slm.generation.GenerationSettings.min_token_prob``), and :func:`unsure_answer` replaced it
    withheld: str | None = None


def format_number(x: float) -> str:
    """Round to two decimals and drop trailing zeros: 3.10 -> 3.1, 4.00 -> 4, -0.001 -> 0."""
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


# ----------------------------------------------------------------------------------------------------
# calc: an arithmetic expression, walked node by node
# ----------------------------------------------------------------------------------------------------

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b}
_FUNCTIONS: dict[str, Callable[[float], float]] = {"sqrt": math.sqrt}


def _bounded(value: float, limits: Limits) -> float:
    if isinstance(value, complex) or not math.isfinite(value) or abs(value) > limits.max_abs:
        raise ToolError(f"a number out of bounds (|x| <= {limits.max_abs:g})")
    return value


def _evaluate(node: ast.AST, limits: Limits) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value, limits)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, limits)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, limits), _evaluate(node.right, limits)
        if isinstance(node.op, ast.Pow) and abs(right) > limits.max_exponent:
            raise ToolError(f"exponent {right:g} out of bounds (|b| <= {limits.max_exponent:g})")
        if isinstance(node.op, ast.Pow) and left == 0 and right < 0:
            raise ToolError("zero to a negative power")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ToolError("division by zero")
        if isinstance(node.op, ast.Pow) and abs(left) > 1 and abs(right) * math.log10(abs(left)) > 15.5:
            raise ToolError(f"a number out of bounds (|x| <= {limits.max_abs:g})")  # before computing it
        return _bounded(_BINARY[type(node.op)](left, right), limits)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
            and len(node.args) == 1 and not node.keywords):
        argument = _evaluate(node.args[0], limits)
        if node.func.id == "sqrt" and argument < 0:
            raise ToolError("the square root of a negative number")
        return _bounded(_FUNCTIONS[node.func.id](argument), limits)
    raise ToolError(f"{type(node).__name__} is not arithmetic")


def _depth(node: ast.AST) -> int:
    """Nesting depth, counted without recursion (the limit is checked before :func:`_evaluate` recurses)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(current))
    return deepest


#: a whole argument "X percent of Y", as a request says it: read as ``X / 100 * Y`` (only whole: inside a longer
#: expression the reading would bind wrongly, "10 percent of 5 ** 2", or mix both forms, "10 percent of 97 / 100")
_PERCENT_OF = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s+percent\s+of\s+(-?\d+(?:\.\d+)?)\s*")


def calc(argument: str, limits: Limits = LIMITS) -> str:
    """The value of the arithmetic ``argument`` (``"50 - 3"`` -> ``"47"``, ``"10 percent of 97"`` -> ``"9.7"``); a
    ``ToolError`` for anything else."""
    if len(argument) > limits.max_chars:
        raise ToolError(f"an expression longer than {limits.max_chars} characters")
    try:
        percent = _PERCENT_OF.fullmatch(argument)
        tree = ast.parse(f"{percent[1]} / 100 * ({percent[2]})" if percent else argument.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise ToolError("not an arithmetic expression") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > limits.max_nodes:
        raise ToolError(f"{nodes} syntax nodes (at most {limits.max_nodes})")
    if _depth(tree) > limits.max_depth:
        raise ToolError(f"nested deeper than {limits.max_depth}")
    return format_number(_evaluate(tree.body, limits))


# ----------------------------------------------------------------------------------------------------
# convert: a quantity from one unit to another, by pint
# ----------------------------------------------------------------------------------------------------

_QUANTITY = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z_]+)\s*->\s*([A-Za-z_]+)\s*")


@lru_cache(maxsize=1)
def unit_registry():
    """pint's default registry, built once (about half a second) on the first conversion."""
    return pint.UnitRegistry()


def convert(argument: str, limits: Limits = LIMITS) -> str:
    """``"64 celsius -> fahrenheit"`` -> ``"147.2"``: the number in the target unit; a ``ToolError`` for a malformed
    argument, a unit pint does not know or units of different kinds."""
    match = _QUANTITY.fullmatch(argument) if len(argument) <= limits.max_chars else None
    if match is None:
        raise ToolError("not '<number> <unit> -> <unit>'")
    value, source, target = _bounded(float(match[1]), limits), match[2], match[3]
    registry = unit_registry()
    try:
        converted = registry.Quantity(value, registry.parse_units(source)).to(registry.parse_units(target))
    except (pint.errors.PintError, TypeError, ValueError, AttributeError) as e:  # unknown unit, other dimension
        raise ToolError(f"cannot convert {source} to {target} ({type(e).__name__})") from None
    return format_number(_bounded(float(converted.magnitude), limits))


# ----------------------------------------------------------------------------------------------------
# time and date: the clock
# ----------------------------------------------------------------------------------------------------

def clock_time(now: datetime) -> str:
    """``3:05 p.m.``, as the sample's answers write times."""
    hour = now.hour % 12 or 12
    return f"{hour}:{now.minute:02d} {'a.m.' if now.hour < 12 else 'p.m.'}"


def calendar_date(now: datetime) -> str:
    """``Sunday, December 6, 2026``."""
    return f"{now:%A}, {now:%B} {now.day}, {now.year}"


#: tool name -> (takes an argument, run(argument, now, request)); ``request`` is what the user asked
TOOLS: dict[str, tuple[bool, Callable[[str, datetime, str | None], str]]] = {
    "calc": (True, lambda argument, now, request: calc(argument)),
    "convert": (True, lambda argument, now, request: convert(argument)),
    "time": (False, lambda argument, now, request: clock_time(now)),
    "date": (False, lambda argument, now, request: calendar_date(now)),
    "request": (False, lambda argument, now, request: repeated_request(request)),
}


#: the words that turn a request into the assistant's echo of it ("share my location" -> "share your location")
SECOND_PERSON = {"my": "your", "me": "you", "i": "you", "mine": "yours", "myself": "yourself", "i'm": "you're",
                 "us": "you", "our": "your", "ours": "yours"}
# what frames a request without being what is asked: "Could you ... for me?", "hey assistant, please ..."
_POLITE_START = re.compile(r"^(?:(?:hey|hi|ok|okay) assistant |quick question |please |(?:can|could|would|will) you |"
                           r"i(?: need| want| would like|'d like) (?:you )?to )+", re.IGNORECASE)
_POLITE_END = re.compile(r"(?: for me| please| thanks| thank you)+$", re.IGNORECASE)
_REQUEST_WORD = re.compile(r"[^\W_]+(?:['.-][^\W_]+)*")  # letters of any script and digits
# a question asks for a fact, not an action ("Sorry, I can't how do you say hello" answers it in broken words): a
# question word, or a helper verb before its subject ("is it", "can I", "will it"; "do the laundry" is an action),
# read before "I" becomes "you"; a question word after a preposition ("at what temperature ..."), "when" before a
# helper verb ("when did the Berlin Wall fall"); or what is left of "I want to know ..." once the frame took "I want to"
# ("Sorry, I can't know the weather" reads wrong). "Tell me what is on" is declined: "Sorry, I can't tell you ..."
_QUESTION_START = re.compile(r"^(?:know\b|(?:at|in|on|for|by|from|to|with) (?:what|which|whom|whose|how)\b|"
                             r"when (?:am|is|are|was|were|do|does|did|can|could|will|would|should|shall|have|has)\b|"
                             r"(?:what|what's|who|who's|whose|where|where's|why|which|how)\b|(?:when )?(?:"
                             r"(?:am|is|are|was|were) (?:i|you|we|they|it|there|he|she|my|the|this|that)|"
                             r"(?:do|does|did|can|could|will|would|should|shall|have|has) (?:i|you|we|they|it|there|he|"
                             r"she))\b)", re.IGNORECASE)


def asked_words(request: str) -> list[str]:
    """The words of what was asked: punctuation and the polite frame dropped ("Could you share my location with
    Anna for me?" -> share my location with Anna), as the user said them."""
    words = " ".join(_REQUEST_WORD.findall(request.replace("\u2019", "'")))
    # a space after the start and before the end, so that a request of "please" alone leaves nothing
    return _POLITE_END.sub("", " " + _POLITE_START.sub("", words + " ").strip()).split()


def echo_request(request: str) -> str:
    """What was asked, as the assistant repeats it (:func:`asked_words`): first person turned to second, the first
    word in lower case (a sentence's capital, which a name starting the request loses too), the other words as
    written ("Could you share my location with Anna for me?" -> "share your location with Anna")."""
    return _in_second_person(asked_words(request))


def _in_second_person(words: list[str]) -> str:
    if words and words[0][:1].isupper() and not words[0].isupper():
        words = [words[0].lower(), *words[1:]]  # the sentence's capital, not a name's ("Transfer money ...")
    return " ".join(SECOND_PERSON.get(word.lower(), word) for word in words)


def repeated_request(request: str | None) -> str:
    """The ``request`` tool's result: :func:`echo_request`; a ``ToolError`` when nothing is left to repeat, or when
    what was asked is a question (the tool declines actions; a question it cannot answer falls back instead)."""
    words = asked_words(request or "")
    if not words:
        raise ToolError("request: no request to repeat")
    if _QUESTION_START.match(" ".join(words)):
        raise ToolError("request: a question is not an action to decline")
    return _in_second_person(words)


def run_call(tool: str, argument: str | None, now: datetime, request: str | None = None) -> str:
    """The result of one call (``request``: what the user asked, for the ``request`` tool); a ``ToolError`` naming
    what is wrong with it."""
    if tool not in TOOLS:
        raise ToolError(f"unknown tool {tool!r}")
    takes_argument, run = TOOLS[tool]
    if takes_argument and not (argument and argument.strip()):
        raise ToolError(f"{tool} needs an argument")
    if not takes_argument and argument is not None and argument.strip():
        raise ToolError(f"{tool} takes no argument")
    return run(argument or "", now, request)


def unsure_answer(request: str, model_text: str) -> ExecutedText:
    """What replaces an answer the model was unsure of (``model_text``, kept as ``withheld``): the decline of the
    action asked, by name (:data:`DECLINE` executed), or :data:`UNKNOWN_ANSWER` for a question or a request with
    nothing left to repeat. Never the guess itself: "Calling Chloe." for "call grandma" misleads where "Sorry, I
    can't call grandma." does not."""
    try:
        text = DECLINE.replace("<<request>>", repeated_request(request))
    except ToolError:
        text = UNKNOWN_ANSWER
    return ExecutedText(text) if text == model_text else ExecutedText(text, withheld=model_text)


def execute_calls(text: str, now: datetime | None = None, request: str | None = None) -> ExecutedText:
    """``text`` with every call replaced by its result, and the calls; :data:`FALLBACK` when any call fails or a
    stray ``<<`` / ``>>`` remains. ``now`` is the clock for ``time`` and ``date`` (default: the machine's);
    ``request`` what the user asked (the instruction), which the ``request`` tool repeats."""
    if "<<" not in text and ">>" not in text:
        return ExecutedText(text)
    now = now or datetime.now()
    calls: list[ToolCall] = []

    def splice(match: re.Match) -> str:
        tool, argument = match[1], match[2]
        shown = (argument or "").strip()
        try:
            result = run_call(tool, argument, now, request)
        except ToolError as e:
            calls.append(ToolCall(tool, shown, None, str(e)))
            return ""
        except Exception as e:  # noqa: BLE001 -- the call is model output: whatever it trips must not crash an answer
            log.warning("tool call %s(%r) failed: %s", tool, shown, e)
            calls.append(ToolCall(tool, shown, None, f"failed ({type(e).__name__})"))
            return ""
        calls.append(ToolCall(tool, shown, result))
        if result.endswith(".") and match.string[match.end():match.end() + 1] == ".":
            return result[:-1]  # "It's <<time>>." with "3:05 p.m.": one full stop, not two
        return result

    spliced = CALL.sub(splice, text)
    if any(call.result is None for call in calls) or "<<" in spliced or ">>" in spliced:
        return ExecutedText(FALLBACK, tuple(calls), fell_back=True)
    return ExecutedText(spliced, tuple(calls))
