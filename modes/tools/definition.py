"""A tool is one definition: name, description, typed parameters and code.

    @tool
    def read(path: Annotated[str, "File to read, workspace-relative."],
             offset: Annotated[int, "First line, 1-based."] = 1) -> str:
        '''Read a file as numbered lines.'''

The JSON schema the model sees is derived from the signature and docstring, so
a tool cannot drift from its schema. `Tool.invoke` checks the model's raw
arguments against that same signature; anything wrong comes back as a
ToolInputError worded for the model, never as a crash.

Tools are built by factories closed over a workspace (see files.py, git.py):
the workspace is never a parameter the model can see.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args, get_origin

import attrs

from dispatcher.errors import ToolInputError

_JSON_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@attrs.frozen
class Parameter:
    name: str
    json_type: str
    python_type: type
    description: str
    required: bool
    default: Any = None
    nullable: bool = False
    choices: tuple[str, ...] | None = None

    def schema(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": self.json_type, "description": self.description}
        if self.choices:
            entry["enum"] = list(self.choices)
        if not self.required and self.default is not None:
            entry["default"] = self.default
        return entry

    def check(self, value: Any) -> Any:
        """Return `value` if it fits this parameter, else raise ToolInputError."""
        if value is None and (self.nullable or not self.required):
            return self.default if not self.nullable else None
        expected = self.python_type
        fits = isinstance(value, expected) and not (expected is not bool and isinstance(value, bool))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value, fits = float(value), True
        if not fits:
            raise ToolInputError(
                f"argument {self.name!r} must be {_article(self.json_type)}, "
                f"not {type(value).__name__} {json.dumps(value)[:60]}"
            )
        if self.choices and value not in self.choices:
            raise ToolInputError(f"argument {self.name!r} must be one of {', '.join(self.choices)}")
        return value


@attrs.frozen
class Tool:
    name: str
    description: str
    parameters: tuple[Parameter, ...]
    function: Callable[..., str]

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema litellm passes to every provider."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {p.name: p.schema() for p in self.parameters},
                    "required": [p.name for p in self.parameters if p.required],
                    "additionalProperties": False,
                },
            },
        }

    def bind(self, raw_arguments: str | dict | None) -> dict[str, Any]:
        """Parse and check the model's arguments; raise ToolInputError when wrong."""
        if isinstance(raw_arguments, dict):
            arguments = raw_arguments
        else:
            text = (raw_arguments or "").strip() or "{}"
            try:
                arguments = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ToolInputError(f"arguments are not valid JSON ({exc.msg} at char {exc.pos})") from exc
        if not isinstance(arguments, dict):
            raise ToolInputError("arguments must be a JSON object")
        known = {p.name: p for p in self.parameters}
        unknown = sorted(set(arguments) - set(known))
        if unknown:
            raise ToolInputError(
                f"unknown argument {', '.join(map(repr, unknown))}; {self.name} takes {', '.join(known) or 'none'}"
            )
        bound = {}
        for parameter in self.parameters:
            if parameter.name not in arguments:
                if parameter.required:
                    raise ToolInputError(f"missing required argument {parameter.name!r}")
                bound[parameter.name] = parameter.default
            else:
                bound[parameter.name] = parameter.check(arguments[parameter.name])
        return bound

    def invoke(self, raw_arguments: str | dict | None) -> str:
        """Run the tool; a ToolInputError becomes an error text for the model."""
        try:
            return sendable(self.function(**self.bind(raw_arguments)))
        except ToolInputError as exc:
            return sendable(f"Error: {exc}")


def sendable(text: str) -> str:
    """`text` as valid UTF-8: a file name that is not (decoded with
    surrogateescape, as Python decodes names) shows its bytes as \\xNN escapes,
    where a lone surrogate would make the next model request unencodable and
    end the run."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate no file name decodes to
            return text.encode("utf-8", "replace").decode("utf-8")
    return text


def tool(function: Callable[..., str] | None = None, *, name: str | None = None):
    """Turn a typed, documented function into a Tool (usable with or without arguments)."""

    def build(fn: Callable[..., str]) -> Tool:
        description = inspect.cleandoc(fn.__doc__ or "").strip()
        if not description:
            raise TypeError(f"tool {fn.__name__} needs a docstring: it is the model's description")
        hints = typing.get_type_hints(fn, include_extras=True)
        parameters = tuple(
            _parameter(p, hints.get(p.name)) for p in inspect.signature(fn).parameters.values()
        )
        return Tool(name=name or fn.__name__, description=description, parameters=parameters, function=fn)

    return build(function) if function is not None else build


def _parameter(parameter: inspect.Parameter, hint: Any) -> Parameter:
    if get_origin(hint) is not Annotated:
        raise TypeError(f"parameter {parameter.name} needs Annotated[type, 'description']")
    base, description = get_args(hint)[0], get_args(hint)[1]
    nullable = False
    if get_origin(base) in (typing.Union, types.UnionType):
        members = [m for m in get_args(base) if m is not type(None)]
        nullable, base = len(members) < len(get_args(base)), members[0]
    choices = None
    if get_origin(base) is Literal:
        choices, base = tuple(get_args(base)), str
    if base not in _JSON_TYPES:
        raise TypeError(f"parameter {parameter.name}: unsupported type {base!r}")
    required = parameter.default is inspect.Parameter.empty
    return Parameter(
        name=parameter.name,
        json_type=_JSON_TYPES[base],
        python_type=base,
        description=description,
        required=required,
        default=None if required else parameter.default,
        nullable=nullable,
        choices=choices,
    )


def _article(json_type: str) -> str:
    return f"an {json_type}" if json_type[0] in "aeiou" else f"a {json_type}"
