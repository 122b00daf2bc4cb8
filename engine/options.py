"""Typed stage options, validated once: the one place where every default and limit lives.

A stage's options are a frozen dataclass deriving from :class:`StageOptions`; each field
is declared with :func:`option`, which records its help text, bounds and choices.
``Options.from_dict(data)`` checks types, ranges and unknown keys and raises
:class:`OptionsError` carrying one message per field, so the web form, the REST API, the
command line and the worker all reject the same input with the same words, and a default
is written only here. ``Options.spec()`` describes the fields for the form and the CLI.

Values are checked strictly: a bool is a bool, an int is an int (never a bool or a float
with a fraction), a float is a finite number within its bounds. The command line and the
form parse text into these types first.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from engine.errors import EngineError

MAX_TEXT = 500
"""Longest string an option takes."""
MAX_INPUTS = 64
"""Most inputs an ``input_shapes`` mapping may name."""
MAX_RANK = 8
MAX_DIM = 2**31 - 1


class OptionsError(EngineError):
    """Options that do not validate. ``errors`` maps a field path (``profile.window_s``)
    to what is wrong with it."""

    code = "invalid_options"

    def __init__(self, errors: Mapping[str, str]):
        self.errors = dict(errors)
        text = "; ".join(f"{field}: {message}" for field, message in self.errors.items())
        super().__init__(f"invalid options: {text}", hint="Fix the named fields and retry.")


def option(
    default: Any,
    help: str,
    *,
    min: float | None = None,
    max: float | None = None,
    choices: tuple[str, ...] | None = None,
    label: str | None = None,
    public: bool = True,
    server_id: bool = False,
) -> Any:
    """Declare an option field. ``public=False`` hides it from the form (the API and
    the CLI still take it); ``server_id=True`` marks the id of a stored object, which the
    command line names by a file instead."""
    meta = {
        "help": help,
        "min": min,
        "max": max,
        "choices": choices,
        "label": label,
        "public": public,
        "server_id": server_id,
    }
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=meta)
    if isinstance(default, list):
        default = tuple(default)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class OptionSpec:
    """One field as the form and the CLI see it."""

    name: str
    kind: str  # bool, int, float, str, str_list, shapes, number_map, optional_int/_str/_float
    default: Any
    help: str
    label: str
    min: float | None
    max: float | None
    choices: tuple[str, ...] | None
    public: bool
    server_id: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {
            "choices": list(self.choices) if self.choices else None,
            "default": _jsonable(self.default),
        }


@dataclass(frozen=True)
class StageOptions:
    """Base of every stage's options: validation from plain data and back."""

    stage: ClassVar[str] = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None = None, *, prefix: str | None = None) -> Self:
        """Validated options from ``data`` (missing keys take their defaults). Raises
        :class:`OptionsError` naming every bad field as ``prefix.field``."""
        prefix = cls.stage if prefix is None else prefix
        data = {} if data is None else data
        path = (lambda name: f"{prefix}.{name}") if prefix else (lambda name: name)
        if not isinstance(data, Mapping):
            raise OptionsError({prefix or "options": "expected an object of options"})
        errors: dict[str, str] = {}
        values: dict[str, Any] = {}
        specs = {s.name: s for s in cls.spec()}
        for key in data:
            if key not in specs:
                known = ", ".join(specs) or "none"
                errors[path(str(key)[:80])] = f"unknown option (known: {known})"
        for name, spec in specs.items():
            if name not in data:
                continue
            try:
                values[name] = _convert(spec, data[name])
            except ValueError as e:
                errors[path(name)] = str(e)
        if errors:
            raise OptionsError(errors)
        try:
            options = cls(**values)
            options.check()
        except _FieldError as e:
            raise OptionsError({path(e.field): e.message}) from None
        return options

    def check(self) -> None:
        """Checks across fields; raise ``self.invalid(field, message)``."""

    @staticmethod
    def invalid(field: str, message: str) -> Exception:
        return _FieldError(field, message)

    def to_dict(self) -> dict:
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def spec(cls) -> list[OptionSpec]:
        hints = typing.get_type_hints(cls)
        specs = []
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            meta = f.metadata
            specs.append(
                OptionSpec(
                    name=f.name,
                    kind=_kind(hints[f.name], f.name),
                    default=default,
                    help=meta.get("help", ""),
                    label=meta.get("label") or f.name.replace("_", " "),
                    min=meta.get("min"),
                    max=meta.get("max"),
                    choices=meta.get("choices"),
                    public=meta.get("public", True),
                    server_id=meta.get("server_id", False),
                )
            )
        return specs


class _FieldError(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def _kind(hint: Any, name: str) -> str:
    if hint is bool:
        return "bool"
    if hint is int:
        return "int"
    if hint is float:
        return "float"
    if hint is str:
        return "str"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and args == (str, Ellipsis):
        return "str_list"
    if origin is dict and args and args[0] is str:
        return "shapes" if typing.get_origin(args[1]) is tuple else "number_map"
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        if inner == [int]:
            return "optional_int"
        if inner == [str]:
            return "optional_str"
        if inner == [float]:
            return "optional_float"
    raise TypeError(f"option {name}: unsupported type {hint!r}")


def _convert(spec: OptionSpec, value: Any) -> Any:
    kind = spec.kind
    if kind.startswith("optional_"):
        if value is None:
            return None
        kind = kind.removeprefix("optional_")
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {_show(value)}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
                value = int(value)
            else:
                raise ValueError(f"expected a whole number, got {_show(value)}")
        _check_range(spec, value)
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {_show(value)}")
        if isinstance(value, int) and abs(value) > 2**63:
            raise ValueError(f"{_show(value)} is out of range")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError("expected a finite number")
        _check_range(spec, value)
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"expected text, got {_show(value)}")
        if len(value) > MAX_TEXT:
            raise ValueError(f"longer than {MAX_TEXT} characters")
        if spec.choices is not None and value not in spec.choices:
            raise ValueError(f"{_show(value)} is not one of {', '.join(spec.choices)}")
        return value
    if kind == "str_list":
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ValueError(f"expected a list of names, got {_show(value)}")
        if len(value) > 100:
            raise ValueError("more than 100 entries")
        for item in value:
            if not isinstance(item, str):
                raise ValueError(f"expected names, got {_show(item)}")
            if spec.choices is not None and item not in spec.choices:
                raise ValueError(f"{_show(item)} is not one of {', '.join(spec.choices)}")
        return tuple(dict.fromkeys(value))
    if kind == "shapes":
        return parse_shapes(value)
    if kind == "number_map":
        return _number_map(spec, value)
    raise AssertionError(kind)


def _number_map(spec: OptionSpec, value: Any) -> dict[str, float | None]:
    """``{"cosine": 0.999, "top5": null}``: known names, finite numbers or null (off)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected an object of names and numbers, got {_show(value)}")
    result = {}
    for key, number in value.items():
        if spec.choices is not None and key not in spec.choices:
            raise ValueError(f"{_show(key)} is not one of {', '.join(spec.choices)}")
        if number is None:
            result[key] = None
            continue
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ValueError(f"{key}: expected a number or null, got {_show(number)}")
        if not math.isfinite(float(number)) or abs(float(number)) > 1e300:
            raise ValueError(f"{key}: expected a finite number")
        result[key] = float(number)
    return result


def parse_shapes(value: Any) -> dict[str, tuple[int, ...]]:
    """``{"input": [1, 3, 224, 224]}`` checked: names, ranks and positive dims."""
    if not isinstance(value, Mapping):
        raise ValueError('expected {"input_name": [1, 3, 224, 224], ...}')
    if len(value) > MAX_INPUTS:
        raise ValueError(f"more than {MAX_INPUTS} inputs")
    shapes = {}
    for name, dims in value.items():
        if not isinstance(name, str) or not name or len(name) > MAX_TEXT:
            raise ValueError(f"input names must be non-empty text, got {_show(name)}")
        if isinstance(dims, str) or not isinstance(dims, (list, tuple)):
            raise ValueError(f"{name}: expected a list of dimensions, got {_show(dims)}")
        if len(dims) > MAX_RANK:
            raise ValueError(f"{name}: rank {len(dims)} is more than {MAX_RANK}")
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= MAX_DIM:
                raise ValueError(
                    f"{name}: every dimension must be a whole number from 1 to {MAX_DIM}, "
                    f"got {_show(d)}"
                )
        shapes[name] = tuple(dims)
    return shapes


def _check_range(spec: OptionSpec, value: float) -> None:
    if spec.min is not None and value < spec.min:
        raise ValueError(f"must be at least {_number(spec.min)}, got {_show(value)}")
    if spec.max is not None and value > spec.max:
        raise ValueError(f"must be at most {_number(spec.max)}, got {_show(value)}")


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value
