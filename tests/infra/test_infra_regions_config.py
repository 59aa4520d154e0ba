"""The `regions` stack key: validated once, one line naming the key, today's stack unchanged."""

from __future__ import annotations

import pytest

from dedup_schedule.config.capacity import capacity
from dedup_schedule.config.model import ConfigError
from dedup_schedule.config.parser import parse_config
from tests.infra.test_infra_config import minimal

TWO = ["us-central1", "us-east4"]


def test_without_regions_the_stack_runs_in_gcp_region_alone_with_its_environment_unchanged():
    config = parse_config(minimal())
    env = config.handler_env()

    assert config.regions == ("us-central1",)
    assert parse_config(minimal(regions=[])).regions == ("us-central1",)
    assert "DEDUP_KEY_REGION" not in env and "DEDUP_REGIONS" not in env
    assert env["DEDUP_ALLOWED_REGIONS"] == "us-central1"


def test_each_region_admits_its_own_deliveries_and_keys_them_by_the_first():
    config = parse_config(minimal(regions=TWO, database={"location": "nam5"}))

    assert config.regions == tuple(TWO)
    assert [config.region_suffix(region) for region in TWO] == ["", "-us-east4"]
    for region in TWO:
        env = config.handler_env(region)
        assert env["DEDUP_ALLOWED_REGIONS"] == region
        assert (env["DEDUP_KEY_REGION"], env["DEDUP_REGIONS"]) == ("us-central1", ",".join(TWO))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"regions": TWO},
            "scheduler-dedup:database.location: 'us-central1' (the default: gcp:region "
            "us-central1) is one region, but the schedule runs in 2 (us-central1, us-east4): "
            "its outage would stop every region's runs; use a multi-region location "
            "(nam5, nam7, eur3), e.g. nam5 (a location cannot change after the database "
            "is created)",
        ),
        (
            {"regions": TWO, "database": {"location": "us-east4"}},
            "scheduler-dedup:database.location: 'us-east4' is one region, but the schedule",
        ),
        (
            {"regions": ["us-east4", "us-central1"], "database": {"location": "nam5"}},
            "scheduler-dedup:regions: must start with gcp:region ('us-central1')",
        ),
        (
            {"regions": ["us-central1", "us-central1"]},
            "scheduler-dedup:regions: ['us-central1', 'us-central1'] names a region twice",
        ),
        ({"regions": ["us-central1", 4]}, "scheduler-dedup:regions: expected a list of"),
        ({"regions": "us-central1"}, "scheduler-dedup:regions: not valid JSON"),
    ],
)
def test_a_bad_regions_list_or_a_regional_database_is_refused_in_one_line(extra, message):
    with pytest.raises(ConfigError) as refused:
        parse_config(minimal(**extra))

    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


def test_the_capacity_verdict_counts_every_regions_deliveries():
    one = capacity(parse_config(minimal(database={"location": "nam5"})))
    two = capacity(parse_config(minimal(regions=TWO, database={"location": "nam5"})))

    assert (one.needed, one.holds) == (two.needed, two.holds)
    assert not one.summary().startswith("each of")
    assert two.summary().startswith(
        f"each of 2 regions' handlers (every region sends every run; {2 * one.in_flight} "
        "in flight over all regions): "
    )
