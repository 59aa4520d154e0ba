"""Pulumi.yaml and Pulumi.<stack>.yaml read as the Pulumi CLI reads them, not as PyYAML does.

The CLI (pulumi workspace/loaders.go LoadProjectStackBytes) decodes a stack file
with gopkg.in/yaml.v3 into `any`, writes it back with yaml.v3 and decodes that
into config values. yaml.v3 resolves plain scalars by YAML 1.2 rules; PyYAML
applies YAML 1.1, so the same file could pass `make plan` and fail or differ in
`pulumi up` (`paused: yes` is true to PyYAML and the string "yes" to the CLI).
PyYAML only parses here: every plain scalar comes out untyped, `RULES` (one table,
each rule with the source it follows) types it, `_round_trip` applies what the
re-encoding changes, and a top-level config value becomes what config.Value holds
(`_config_value`: a string, a number's JSON text, or a map or list the program
gets as Go's JSON, `config_json`). docs/deploy.md lists the rules.
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
_CLOCK = r"([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:[.,]([0-9]+))?"
# yaml.v3 resolve.go allowedTimestampFormats, as Go's time.Parse reads each layout.
_TIMESTAMPS = (
    re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})[Tt]" + _CLOCK + r"(Z|[-+][0-9]{2}:[0-9]{2})"),
    re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2}) " + _CLOCK + r"()"),
    re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})()()()()()"),
)


class GoTime(str):
    """A plain timestamp as the program receives it: Go's Time.String() text.

    A str, so it travels as the CLI delivers it; `source` keeps what the file
    said, so the offline tools can warn that the CLI rewrote it.
    """

    source: str

    def __new__(cls, text: str, source: str) -> GoTime:
        value = super().__new__(cls, text)
        value.source = source
        return value


def _days_in(year: int, month: int) -> int:
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]


def _go_time(text: str) -> GoTime | None:
    """yaml.v3 parseTimestamp, then Time.String() ("2006-01-02 15:04:05.999999999 -0700 MST").

    time.Parse range-checks every field; "Z" is UTC, no zone is UTC, and an offset
    gets a fixed zone without a name, printed as the offset (+0100 +0100). A zero
    offset takes the Local zone: UTC here, as on a CI runner (TZ unset).
    """
    match = next((m for m in (r.fullmatch(text) for r in _TIMESTAMPS) if m), None)
    if match is None:
        return None
    year, month, day = (int(g) for g in match.groups()[:3])
    hour, minute, second = (int(g or 0) for g in match.groups()[3:6])
    fraction, zone = match[7] or "", match[8] or "Z"
    offset_h, offset_m = (int(zone[1:3]), int(zone[4:6])) if zone != "Z" else (0, 0)
    if not (
        1 <= month <= 12
        and 1 <= day <= _days_in(year, month)
        and hour < 24
        and minute < 60
        and second < 60
        and offset_h <= 24
        and offset_m <= 60
    ):
        return None
    nanos = fraction[:9].ljust(9, "0").rstrip("0")
    clock = f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
    minutes = offset_h * 60 + offset_m
    offset = f"{zone[0]}{minutes // 60:02d}{minutes % 60:02d}"
    zone_text = f"{offset} {offset}" if minutes else "+0000 UTC"
    return GoTime(f"{clock}{'.' + nanos if nanos else ''} {zone_text}", text)


def _go_float_of(text: str) -> float | None:
    """A finite float by resolve()'s float branches; the '.' hint skips the '_' removal."""
    plain = text if text.startswith(".") else text.replace("_", "")
    if _YAML_STYLE_FLOAT.fullmatch(plain) is None or not math.isfinite(float(plain)):
        return None
    return float(plain)


@dataclass(frozen=True)
class Rule:
    """Plain scalars `matches` accepts become `value(text)`; the first matching rule wins."""

    name: str
    matches: Callable[[str], bool]
    value: Callable[[str], Any]


def _words(*words: str) -> Callable[[str], bool]:
    return frozenset(words).__contains__


# --- the resolution table: each rule as yaml.v3 v3.0.1 resolve.go resolve() applies it -----
# to a plain scalar (decode.go scalar(): a quoted scalar is a string, whatever it spells).
RULES: tuple[Rule, ...] = (
    # resolve.go init() resolveMapList: "", "~", "null", "Null", "NULL" -> nil.
    Rule("null", _words("", "~", "null", "Null", "NULL"), lambda _: None),
    # resolve.go init() resolveMapList: only true/True/TRUE and false/False/FALSE are bools;
    # YAML 1.1's yes/no/on/off/y/n (any case) are in no list, so they are strings.
    Rule("true", _words("true", "True", "TRUE"), lambda _: True),
    Rule("false", _words("false", "False", "FALSE"), lambda _: False),
    # resolve.go init() resolveMapList: .nan/.NaN/.NAN, [+]/-.inf/.Inf/.INF.
    Rule("nan", _words(".nan", ".NaN", ".NAN"), lambda _: math.nan),
    Rule(
        "inf",
        _words(*(s + w for s in ("", "+") for w in (".inf", ".Inf", ".INF"))),
        lambda _: math.inf,
    ),
    Rule("-inf", _words("-.inf", "-.Inf", "-.INF"), lambda _: -math.inf),
    # resolve.go resolve() case 'D', 'S' -> parseTimestamp (allowedTimestampFormats); decode.go
    # scalar() keeps the time.Time in interface{}; pulumi sdk/go/common/resource/config/
    # object.go unmarshalObject turns it into v.String(), at every depth.
    Rule("timestamp", lambda t: _go_time(t) is not None, _go_time),
    # resolve.go resolve(): '_' removed, then strconv.ParseInt(plain, 0, 64), then ParseUint:
    # 0x hex, 0o octal, 0b binary, a leading 0 is octal (0777 = 511), "-0" is 0.
    Rule(
        "int",
        lambda t: t[:1] in "+-0123456789" and _go_int(t.replace("_", "")) is not None,
        lambda t: _go_int(t.replace("_", "")),
    ),
    # resolve.go resolve(): yamlStyleFloat ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$
    # on the '_'-less text, if strconv.ParseFloat succeeds (1e400 is out of range: a string):
    # 1e3 needs no dot (YAML 1.2), and 08 (not octal) is 8.0; hint '.': ParseFloat (".5").
    Rule("float", lambda t: _go_float_of(t) is not None, lambda t: _go_float_of(t)),
)


def resolve(text: str) -> Any:
    """The value of a plain scalar: the first rule that matches, else the text itself."""
    for rule in RULES:
        if rule.matches(text):
            return rule.value(text)
    return text


def _round_trip(value: Any) -> Any:
    """What pulumi workspace/loaders.go LoadProjectStackBytes' re-encoding changes.

    It decodes the file into `any`, writes it back with yaml.v3 and decodes that.
    encode.go floatv writes strconv.FormatFloat(f, 'g', -1, 64), which has neither
    dot nor exponent for an integral |f| < 1e6, so it reads back as an int
    (`1e3` -> 1000, `-0.0` -> 0). Times (encode.go timev: RFC3339Nano) and every
    other value read back as they were, strings too (stringv quotes what would not).
    """
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e6:
        return int(value)
    return value


def _go_g(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 64), which is also what fmt's %v prints."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    number = Decimal(repr(value)).normalize()
    sign, digits, exponent = number.as_tuple()
    exp10 = len(digits) + int(exponent) - 1
    if -4 <= exp10 < 6:
        return format(number, "f")
    mantissa = "".join(map(str, digits))
    mantissa = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"


def _go_key(key: Any) -> str:
    """A map key as pulumi config/object.go unmarshalObject writes it: fmt.Sprintf("%v", k)."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float):
        return _go_g(key)
    return "<nil>" if key is None else str(key)


def _key_text(node: yaml.Node) -> str:
    return node.value if isinstance(node, yaml.ScalarNode) else f"<{node.id}>"


def _value(node: yaml.Node, path: str) -> Any:
    if isinstance(node, yaml.ScalarNode):
        # yaml.v3 decode.go scalar(): quoted scalars and explicit !!str are strings; other
        # explicit tags are typed as the plain scalar would be.
        return node.value if node.tag == _STR else _round_trip(resolve(node.value))
    if isinstance(node, yaml.SequenceNode):
        return [_value(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
    return {_go_key(key): value for key, value, _ in _pairs(node, path)}


def _pairs(node: yaml.MappingNode, path: str) -> list[tuple[Any, Any, yaml.Node]]:
    """(key, value, value node) of each entry; refuses what yaml.v3 refuses in a mapping."""
    pairs = []
    seen: dict[tuple[str, str], int] = {}
    for key_node, value_node in node.value:
        text, line = _key_text(key_node), key_node.start_mark.line + 1
        key = f"{path}.{text}" if path else text
        # yaml.v3 decode.go mapping(): uniqueKeys compares each key's kind and source text:
        # "mapping key %#v already defined at line %d".
        if (key_node.id, text) in seen:
            raise StackYamlError(
                f"line {line}: mapping key {key!r} already defined at line "
                f"{seen[key_node.id, text]}"
            )
        seen[key_node.id, text] = line
        # yaml.v3 decode.go mapping(): "<<" merges a map in; the offline tools do not.
        if text == "<<" and key_node.tag == _PLAIN:
            raise StackYamlError(
                f"line {line}: merge key {key!r} is not supported offline; write the keys out"
            )
        pairs.append((_value(key_node, path), _value(value_node, key), value_node))
    return pairs


class NoValue(str):
    """A top-level config key with a null value: the CLI's empty string, with its warning.

    yaml.v3 decode.go prepare() never calls config.Value's UnmarshalYAML for a null
    node, so the key holds the zero Value, "" (pulumi workspace/loaders.go
    checkForEmptyConfig warns "No value for configuration key").
    """


def _config_value(key: str, value: Any) -> Any:
    """A top-level config value as pulumi config/value.go Value.UnmarshalYAML keeps it.

    object.go UnmarshalYAML decodes into `any`, then MarshalString: a string as is,
    a bool or number as its JSON text (`True` -> "true", `0777` -> "511"), a map
    or list resolved (the program gets its JSON, `config_json`).
    """
    if value is None:
        return NoValue("")
    if isinstance(value, (bool, int, float)):
        try:
            return config_json(value)
        except StackYamlError as error:
            # config/map.go Map.UnmarshalYAML: "could not unmarshal map: ..."
            raise StackYamlError(f"config.{key}: {error}; the Pulumi CLI refuses it") from None
    return value


def _config(value: Any) -> Any:
    """The `config:` map with each top-level value as the CLI keeps it (`_config_value`)."""
    if not isinstance(value, dict):
        return value
    for key in value:
        if not isinstance(key, str):
            # config/key.go ParseKey refuses a key the CLI could not namespace.
            raise StackYamlError(
                f"config: could not parse {_go_key(key)} as a configuration key "
                "(configuration keys should be of the form `<namespace>:<name>`)"
            )
    return {key: _config_value(key, item) for key, item in value.items()}


def load(text: str) -> Any:
    """A project or stack file as the CLI reads it; StackYamlError for what it refuses.

    The document is yaml.v3's decoding into `any` after the CLI's round trip, except
    that a top-level `config:` map holds each value as config.Value does (`_config`).
    """
    node = yaml.compose(text, Loader=_Loader)
    if node is None:
        return None
    if not isinstance(node, yaml.MappingNode):
        return _value(node, "")
    document = {}
    for key, value, _ in _pairs(node, ""):
        if not isinstance(key, str):
            # pulumi workspace/project.go SimplifyMarshalledValue, on the whole document.
            raise StackYamlError(f"expected only string keys, got '{_go_key(key)}'")
        document[key] = _config(value) if key == "config" else value
    return document


def _walk_cli_rewrites(value: Any, path: str) -> list[str]:
    if isinstance(value, GoTime):
        return [
            f"{path}: the unquoted date {value.source} reaches the program as {str(value)!r} "
            "(the Pulumi CLI reads it as a time); quote it to keep the text"
        ]
    if isinstance(value, dict):
        return [w for k, v in value.items() for w in _walk_cli_rewrites(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [w for i, v in enumerate(value) for w in _walk_cli_rewrites(v, f"{path}[{i}]")]
    return []


def cli_warnings(config: dict[str, Any]) -> list[str]:
    """One line per key the CLI warns of (no value) or rewrites unasked (unquoted dates)."""
    warnings = []
    for key, value in config.items():
        if isinstance(value, NoValue):
            warnings.append(
                f"{key}: no value; the Pulumi CLI treats it as the empty string and warns "
                '(write "" to say so)'
            )
        warnings.extend(_walk_cli_rewrites(value, key))
    return warnings


def _go_float(value: float) -> str:
    """A float as Go's encoding/json writes it: 'f' with the shortest digits, 'e' past 1e21."""
    if math.isnan(value) or math.isinf(value):
        raise StackYamlError(f"json: unsupported value: {_go_g(value)}")
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
        return (
            "{" + ",".join(f"{config_json(k)}:{config_json(value[k])}" for k in sorted(value)) + "}"
        )
    raise StackYamlError(f"{value!r} cannot be written as JSON")
