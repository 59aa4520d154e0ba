"""Pulumi.yaml and Pulumi.<stack>.yaml read as the Pulumi CLI reads them, not as PyYAML does.

The CLI decodes stack files with Go YAML (gopkg.in/yaml.v3), which resolves plain
scalars by YAML 1.2 rules; PyYAML applies YAML 1.1, so the same file could pass
`make plan` and fail or differ in `pulumi up` (`paused: yes` is true to PyYAML and
the string "yes" to the CLI). PyYAML only parses here: every plain scalar comes out
untyped and `RULES` below, one table, says what it becomes. Then, as the CLI does
with a config value: a scalar at the top of `config:` keeps its source text (it is
decoded into a string first), and a map or list is turned into JSON of the resolved
values with Go's encoding/json (`config_json`). The sources each rule follows are
named beside it; docs/deploy.md (Offline tools read a stack as Pulumi does) lists them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import yaml


class StackYamlError(ValueError):
    """A file the CLI would refuse: one line, naming the key and the line."""


# Plain (unquoted, untagged) scalars get this tag from the loader; `RULES` types them.
_PLAIN = "tag:dedup-offline,2026:plain"
_STR = "tag:yaml.org,2002:str"


class _Loader(yaml.SafeLoader):
    """PyYAML's parser with one implicit resolver: every plain scalar is left untyped."""


_Loader.yaml_implicit_resolvers = {None: [(_PLAIN, re.compile(r".*", re.DOTALL))]}


def _go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 64) or ParseUint(text, 0, 64): sign, 0x/0o/0b, or 0 octal."""
    match = re.fullmatch(
        r"([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)", text
    )
    if match is None:
        return None
    sign, digits = match[1], match[2].lower()
    if digits.startswith(("0x", "0o", "0b")):
        value = int(digits, 0)
    elif digits.startswith("0") and len(digits) > 1:
        value = int(digits[1:], 8)
    else:
        value = int(digits)
    value = -value if sign == "-" else value
    if -(2**63) <= value < 2**63 or (not sign and value < 2**64):
        return value
    return None


_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ].*)?")


@dataclass(frozen=True)
class Rule:
    """Plain scalars `matches` accepts become `value(text)`; the first matching rule wins."""

    name: str
    matches: Callable[[str], bool]
    value: Callable[[str], Any]


def _words(*words: str) -> Callable[[str], bool]:
    return frozenset(words).__contains__


# --- the resolution table: each rule as yaml.v3 applies it to a plain scalar ---------------
RULES: tuple[Rule, ...] = (
    # yaml.v3 resolve.go: resolveMapList null: "", "~", "null", "Null", "NULL" -> nil.
    Rule("null", _words("", "~", "null", "Null", "NULL"), lambda _: None),
    # yaml.v3 resolve.go: resolveMapList bool: only "true", "True", "TRUE" (and the three
    # spellings of false) are booleans; YAML 1.1's yes/no/on/off/y/n are strings unless
    # decoded into a Go bool, and a config value is decoded into interface{}.
    Rule("true", _words("true", "True", "TRUE"), lambda _: True),
    Rule("false", _words("false", "False", "FALSE"), lambda _: False),
    # yaml.v3 resolve.go: resolveMapList floats: .nan/.NaN/.NAN, [+-].inf/.Inf/.INF.
    Rule("nan", _words(".nan", ".NaN", ".NAN"), lambda _: math.nan),
    Rule(
        "inf",
        _words(*(s + w for s in ("", "+") for w in (".inf", ".Inf", ".INF"))),
        lambda _: math.inf,
    ),
    Rule("-inf", _words("-.inf", "-.Inf", "-.INF"), lambda _: -math.inf),
    # yaml.v3 resolve.go: resolveMapList negativeZero: "-0", "-0.0" -> float -0.
    Rule("negative zero", _words("-0", "-0.0"), lambda _: -0.0),
    # yaml.v3 resolve.go + decode.go: a plain timestamp (2006-1-2, with an optional time) is
    # kept as its text when decoded into interface{} ("for backward compatibility").
    Rule("timestamp", lambda t: _TIMESTAMP.fullmatch(t) is not None, str),
    # yaml.v3 resolve.go: '_' removed, then strconv.ParseInt(plain, 0, 64) (ParseUint past
    # int64): 0x hex, 0o octal, 0b binary, and a leading 0 is octal (0777 = 511, YAML 1.1
    # style kept "for compatibility").
    Rule(
        "int",
        lambda t: t[:1] in "+-0123456789" and _go_int(t.replace("_", "")) is not None,
        lambda t: _go_int(t.replace("_", "")),
    ),
    # yaml.v3 resolve.go: yamlStyleFloat ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$
    # after '_' removal, if strconv.ParseFloat succeeds (1e400 is out of range: a string):
    # 1e3 is a float (YAML 1.2; PyYAML's 1.1 rules need a dot), so is 08 (not octal, and
    # not decimal to ParseInt).
    Rule(
        "float",
        lambda t: (
            _YAML_STYLE_FLOAT.fullmatch(t.replace("_", "")) is not None
            and math.isfinite(float(t.replace("_", "")))
        ),
        lambda t: float(t.replace("_", "")),
    ),
)


def resolve(text: str) -> Any:
    """The value of a plain scalar: the first rule that matches, else the text itself."""
    for rule in RULES:
        if rule.matches(text):
            return rule.value(text)
    return text


def _key_text(node: yaml.Node) -> str:
    return node.value if isinstance(node, yaml.ScalarNode) else f"<{node.id}>"


def _value(node: yaml.Node, path: str) -> Any:
    if isinstance(node, yaml.ScalarNode):
        # Quoted scalars and explicit !!str are strings; other explicit tags are typed as
        # the plain scalar would be.
        return node.value if node.tag == _STR else resolve(node.value)
    if isinstance(node, yaml.SequenceNode):
        return [_value(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
    return {key: value for key, value, _ in _pairs(node, path)}


def _pairs(node: yaml.MappingNode, path: str) -> list[tuple[Any, Any, yaml.Node]]:
    """(key, value, value node) of each entry; refuses what yaml.v3 refuses in a mapping."""
    pairs = []
    seen: dict[tuple[str, str], int] = {}
    for key_node, value_node in node.value:
        text, line = _key_text(key_node), key_node.start_mark.line + 1
        key = f"{path}.{text}" if path else text
        # yaml.v3 decode.go: uniqueKeys compares each key's kind and source text:
        # "mapping key %#v already defined at line %d".
        if (key_node.id, text) in seen:
            raise StackYamlError(
                f"line {line}: mapping key {key!r} already defined at line "
                f"{seen[key_node.id, text]}"
            )
        seen[key_node.id, text] = line
        # yaml.v3 decode.go: "<<" merges a map in; the offline tools do not implement it.
        if text == "<<" and key_node.tag == _PLAIN:
            raise StackYamlError(
                f"line {line}: merge key {key!r} is not supported offline; write the keys out"
            )
        pairs.append((_value(key_node, path), _value(value_node, key), value_node))
    return pairs


def _config(node: yaml.Node) -> Any:
    """The `config:` map: each top-level scalar as its source text, maps and lists resolved.

    pulumi/pulumi config.Value.UnmarshalYAML first decodes a value into a Go string,
    and yaml.v3 decodes any scalar into a string as its text (null: the empty string);
    only a map or list falls through to interface{} (and JSON).
    """
    if not isinstance(node, yaml.MappingNode):
        return _value(node, "config")
    return {
        key: _config_scalar(value_node) if isinstance(value_node, yaml.ScalarNode) else value
        for key, value, value_node in _pairs(node, "")
    }


def _config_scalar(node: yaml.ScalarNode) -> str:
    return "" if node.tag == _PLAIN and resolve(node.value) is None else node.value


def load(text: str) -> Any:
    """A project or stack file as the CLI decodes it; StackYamlError for what it refuses.

    The document is yaml.v3's interface{} decoding, except that a top-level `config:`
    map keeps its scalars' source text (`_config`).
    """
    node = yaml.compose(text, Loader=_Loader)
    if node is None:
        return None
    if not isinstance(node, yaml.MappingNode):
        return _value(node, "")
    return {
        key: _config(value_node) if key == "config" else value
        for key, value, value_node in _pairs(node, "")
    }


def _go_float(value: float) -> str:
    """A float as Go's encoding/json writes it: 'f' with the shortest digits, 'e' past 1e21."""
    if math.isnan(value) or math.isinf(value):
        raise StackYamlError(
            f"{value} cannot be written as JSON (encoding/json: unsupported value)"
        )
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    if 1e-6 <= abs(value) < 1e21:
        return format(Decimal(repr(value)).normalize(), "f")
    return re.sub(r"e-0(\d)$", r"e-\1", repr(value))


def config_json(value: Any) -> str:
    """`value` as JSON the way Go's json.Marshal writes it: compact, map keys sorted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(config_json(item) for item in value) + "]"
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            bad = next(key for key in value if not isinstance(key, str))
            raise StackYamlError(f"map key {bad!r} is not a string (json: unsupported type)")
        return (
            "{" + ",".join(f"{config_json(k)}:{config_json(value[k])}" for k in sorted(value)) + "}"
        )
    raise StackYamlError(f"{value!r} cannot be written as JSON")
