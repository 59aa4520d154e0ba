"""Each scalar rule of `offline.stack_yaml`, the reading of stack files the Pulumi CLI makes.

The CLI decodes Pulumi.<stack>.yaml with gopkg.in/yaml.v3 (resolve.go for plain
scalars, decode.go for maps and duplicate keys) and keeps a top-level config
scalar as its text (pulumi/pulumi sdk/go/common/resource/config, Value's
UnmarshalYAML decodes into a string first); objects become JSON through Go's
encoding/json. Each test names the rule it pins.
"""

from __future__ import annotations

import math

import pytest

from offline.stack_yaml import StackYamlError, config_json, load


def nested(text: str) -> object:
    """How `text` reads inside a config object (a map value under a config key)."""
    return load(f"config:\n  p:obj:\n    v: {text}\n")["config"]["p:obj"]["v"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # yaml.v3 resolve.go: bool is only true/True/TRUE and false/False/FALSE.
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("false", False),
        ("FALSE", False),
        # yaml.v3 resolve.go: YAML 1.1's yes/no/on/off/y/n are strings in interface{}.
        ("yes", "yes"),
        ("No", "No"),
        ("on", "on"),
        ("OFF", "OFF"),
        ("y", "y"),
        ("n", "n"),
        # yaml.v3 resolve.go: null is "", ~, null, Null, NULL.
        ("~", None),
        ("null", None),
        ("NULL", None),
        ("", None),
        # yaml.v3 decode.go: a timestamp decoded into interface{} stays its text.
        ("2026-12-01", "2026-12-01"),
        ("2026-12-01T05:00:00Z", "2026-12-01T05:00:00Z"),
        # yaml.v3 resolve.go: strconv.ParseInt(s, 0, 64): a leading 0 is octal, 0o too.
        ("0777", 511),
        ("0o17", 15),
        ("0x1F", 31),
        ("0b101", 5),
        ("-017", -15),
        ("1_000", 1000),
        ("17", 17),
        ("+5", 5),
        # yaml.v3 resolve.go: yamlStyleFloat: an exponent needs no dot (YAML 1.2).
        ("1e3", 1000.0),
        ("1.5E-2", 0.015),
        (".5", 0.5),
        # Not octal and not ParseInt decimal, but yamlStyleFloat matches it.
        ("08", 8.0),
        # ParseFloat's range error: not a float, so the text.
        ("1e400", "1e400"),
        # Quoted scalars are strings whatever they spell.
        ("'yes'", "yes"),
        ('"0777"', "0777"),
        ("0x1G", "0x1G"),
    ],
)
def test_a_plain_scalar_inside_an_object_resolves_as_yaml_v3_does(text: str, value: object) -> None:
    read = nested(text)
    assert read == value
    assert type(read) is type(value)


def test_special_floats_and_negative_zero() -> None:
    # yaml.v3 resolve.go: .inf/.nan spellings and "-0" (negativeZero) are floats.
    assert nested(".inf") == math.inf
    assert nested("-.Inf") == -math.inf
    assert math.isnan(nested(".NaN"))
    assert math.copysign(1, nested("-0")) == -1


def test_a_top_level_config_scalar_keeps_its_source_text() -> None:
    # pulumi/pulumi config.Value: a scalar is decoded into a string first, so the
    # program sees exactly what the file says (null: the empty string).
    config = load("config:\n  a: yes\n  b: 0777\n  c: 1e3\n  d: 2026-12-01\n  e: ~\n  f: True\n")[
        "config"
    ]
    assert config == {"a": "yes", "b": "0777", "c": "1e3", "d": "2026-12-01", "e": "", "f": "True"}


def test_a_duplicate_key_is_refused_naming_it() -> None:
    # yaml.v3 decode.go: "mapping key ... already defined at line N".
    with pytest.raises(StackYamlError, match=r"mapping key 'config.gcp:region' already defined"):
        load("config:\n  gcp:region: a\n  gcp:project: p\n  gcp:region: b\n")
    with pytest.raises(StackYamlError, match=r"line 4: mapping key 'config.p:jobs\[0\].id'"):
        load("config:\n  p:jobs:\n    - id: a\n      id: b\n")


def test_objects_become_json_as_go_writes_it() -> None:
    # encoding/json: compact, map keys sorted, floats without a needless ".0".
    value = nested("{b: 1e3, a: [0.5, -0, 1e21, 1e-7], c: ~}")
    assert config_json(value) == '{"a":[0.5,-0,1e+21,1e-7],"b":1000,"c":null}'
    with pytest.raises(StackYamlError, match="unsupported value"):
        config_json(nested(".inf"))
    with pytest.raises(StackYamlError, match="not a string"):
        config_json(nested("{1: a}"))
