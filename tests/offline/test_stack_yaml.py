"""Each rule of `scheduler_dedup.offline.stack_yaml`: stack files read as the Pulumi CLI reads them.

Sources (read, not run: there is no Go toolchain here): gopkg.in/yaml.v3 v3.0.1
(pulumi's sdk/go.mod pin) resolve.go, decode.go, encode.go; pulumi/pulumi
sdk/go/common/workspace/loaders.go LoadProjectStackBytes (decode into `any`,
re-encode, decode into config values) and sdk/go/common/resource/config/object.go
(unmarshalObject, MarshalString). Each test names the source of the rule it pins.
"""

from __future__ import annotations

import math

import pytest

from scheduler_dedup.offline.stack_yaml import (
    GoTime,
    StackYamlError,
    cli_warnings,
    config_json,
    load,
)


def nested(text: str) -> object:
    """How `text` reads inside a config object (a map value under a config key)."""
    return load(f"config:\n  p:obj:\n    v: {text}\n")["config"]["p:obj"]["v"]


def top(text: str) -> object:
    """How `text` reads as a top-level config value (what config.Value holds)."""
    return load(f"config:\n  p:v: {text}\n")["config"]["p:v"]


def check(text: str, inside: object, at_top: str) -> None:
    read = nested(text)
    assert read == inside
    assert type(read) is type(inside)
    assert top(text) == at_top


# yaml.v3 resolve.go init() resolveMapList: no YAML 1.1 yes/no/on/off/y/n, so strings.
@pytest.mark.parametrize("text", ["yes", "No", "on", "OFF", "y", "n", "Y", "N"])
def test_yaml_1_1_booleans_are_strings(text: str) -> None:
    check(text, text, text)


# resolve.go resolveMapList bool; object.go MarshalString: a bool at the top is its JSON text.
@pytest.mark.parametrize(
    ("text", "value"), [("true", True), ("True", True), ("TRUE", True), ("FALSE", False)]
)
def test_three_spellings_of_each_bool(text: str, value: bool) -> None:
    check(text, value, "true" if value else "false")


# resolve.go parseTimestamp (allowedTimestampFormats) -> time.Time, kept by decode.go scalar()
# in interface{}; config/object.go unmarshalObject: v.String(); encode.go timev writes
# RFC3339Nano for the round trip, which reads back the same time.
@pytest.mark.parametrize(
    ("text", "string"),
    [
        ("2026-12-01", "2026-12-01 00:00:00 +0000 UTC"),
        ("2026-12-1", "2026-12-01 00:00:00 +0000 UTC"),
        ("2026-12-01 10:00:00", "2026-12-01 10:00:00 +0000 UTC"),
        ("2026-12-01T10:00:00Z", "2026-12-01 10:00:00 +0000 UTC"),
        ("2026-12-01t10:00:00.250Z", "2026-12-01 10:00:00.25 +0000 UTC"),
        ("2026-12-01T10:00:00.5+01:00", "2026-12-01 10:00:00.5 +0100 +0100"),
    ],
)
def test_a_timestamp_reaches_the_program_as_go_time_string(text: str, string: str) -> None:
    check(text, GoTime(string, text), string)


# time.Parse refuses what no allowedTimestampFormats layout fits (a T needs a zone), and
# out-of-range fields; such text, and a quoted date (decode.go scalar()), stays a string.
@pytest.mark.parametrize("text", ["2026-12-01T10:00:00", "2026-02-30", "2026-13-01", "26-12-01"])
def test_what_is_not_a_go_timestamp_stays_text(text: str) -> None:
    check(text, text, text)


def test_a_quoted_date_stays_a_string() -> None:
    check("'2026-12-01'", "2026-12-01", "2026-12-01")
    assert not isinstance(nested("'2026-12-01'"), GoTime)


# resolve.go resolve(): '_' removed, strconv.ParseInt(plain, 0, 64); MarshalString: decimal.
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0777", 511),
        ("0o17", 15),
        ("0x1F", 31),
        ("0b101", 5),
        ("-017", -15),
        ("1_000", 1000),
        ("+5", 5),
        ("-0", 0),
        ("18446744073709551615", 2**64 - 1),
    ],
)
def test_go_integers(text: str, value: int) -> None:
    check(text, value, str(value))


# resolve.go resolve(): yamlStyleFloat then ParseFloat; the round trip (encode.go floatv,
# FormatFloat 'g') turns an integral float under 1e6 into an int; MarshalString: JSON text.
@pytest.mark.parametrize(
    ("text", "value", "string"),
    [
        ("1e3", 1000, "1000"),
        ("1.0", 1, "1"),
        ("08", 8, "8"),
        ("-0.0", 0, "0"),
        ("1.5E-2", 0.015, "0.015"),
        (".5", 0.5, "0.5"),
        ("1e6", 1e6, "1000000"),
        ("1e21", 1e21, "1e+21"),
    ],
)
def test_go_floats_after_the_round_trip(text: str, value: object, string: str) -> None:
    check(text, value, string)


# ParseFloat's range error (1e400) and a '.'-led text with '_' (hint '.': no '_' removal).
@pytest.mark.parametrize("text", ["1e400", "._5", "0x1G", "1:20"])
def test_what_no_number_rule_takes_stays_text(text: str) -> None:
    check(text, text, text)


# resolve.go resolveMapList null; at the top decode.go prepare() skips config.Value's
# UnmarshalYAML for a null node: the zero Value "", which loaders.go checkForEmptyConfig warns of.
@pytest.mark.parametrize("text", ["~", "null", "NULL", ""])
def test_null_is_null_inside_and_the_empty_string_at_the_top(text: str) -> None:
    assert nested(text) is None
    assert top(text) == ""
    assert cli_warnings(load(f"config:\n  p:v: {text}\n")["config"]) == [
        'p:v: no value; the Pulumi CLI treats it as the empty string and warns (write "" to say so)'
    ]


# resolve.go resolveMapList .inf/.nan; object.go MarshalJSON: json.Marshal refuses them.
def test_special_floats_are_refused_where_json_is_written() -> None:
    assert nested("-.Inf") == -math.inf
    assert math.isnan(nested(".NaN"))
    with pytest.raises(StackYamlError, match=r"config.p:v: json: unsupported value: \+Inf"):
        top(".inf")
    with pytest.raises(StackYamlError, match="json: unsupported value: NaN"):
        config_json(nested("[.nan]"))


# decode.go mapping(): uniqueKeys compares kind and source text of each key.
def test_a_duplicate_key_is_refused_naming_it() -> None:
    with pytest.raises(StackYamlError, match=r"mapping key 'config.gcp:region' already defined"):
        load("config:\n  gcp:region: a\n  gcp:project: p\n  gcp:region: b\n")
    with pytest.raises(StackYamlError, match=r"line 4: mapping key 'config.p:jobs\[0\].id'"):
        load("config:\n  p:jobs:\n    - id: a\n      id: b\n")


# config/object.go unmarshalObject map[any]any: fmt.Sprintf("%v", k); project.go
# SimplifyMarshalledValue refuses a non-string key of the document itself.
def test_map_keys() -> None:
    assert nested("{1: a, true: b, 1e6: c, 2026-12-01: d}") == {
        "1": "a",
        "true": "b",
        "1e+06": "c",
        "2026-12-01 00:00:00 +0000 UTC": "d",
    }
    with pytest.raises(StackYamlError, match="expected only string keys, got '1'"):
        load("1: a\n")


# encoding/json: compact, map keys sorted, floats 'f' below 1e21 and 'e' from there.
def test_objects_become_json_as_go_writes_it() -> None:
    value = nested("{b: 1e3, a: [0.5, -0.0, 1e21, 1e-7], c: ~, d: 2026-12-01}")
    assert config_json(value) == (
        '{"a":[0.5,0,1e+21,1e-7],"b":1000,"c":null,"d":"2026-12-01 00:00:00 +0000 UTC"}'
    )


def test_an_unquoted_date_anywhere_is_warned_of_by_key() -> None:
    config = load("config:\n  p:d: 2026-12-01\n  p:jobs:\n    - body: 2026-12-01\n")["config"]
    assert cli_warnings(config) == [
        f"{key}: the unquoted date 2026-12-01 reaches the program as "
        "'2026-12-01 00:00:00 +0000 UTC' (the Pulumi CLI reads it as a time); "
        "quote it to keep the text"
        for key in ("p:d", "p:jobs[0].body")
    ]
