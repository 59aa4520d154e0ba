"""The notification channels every alert policy of `RunMonitoring` notifies.

The stack config names existing channels by id and e-mail addresses; each address
gets an e-mail channel of its own, named from the address.
"""

from __future__ import annotations

import hashlib
import re

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.monitoring.builders import MonitoringScope


def notification_channels(scope: MonitoringScope) -> tuple[pulumi.Input[str], ...]:
    """The configured channel ids, and one e-mail channel per configured address."""
    config, placement = scope.config, scope.placement
    channels: list[pulumi.Input[str]] = list(config.alerts.notification_channels)
    slugs = [_email_slug(email) for email in config.alerts.emails]
    for email, slug in zip(config.alerts.emails, slugs, strict=True):
        # The readable part alone maps a.b@x.com and a-b@x.com to one name; the hash of
        # the exact address keeps distinct addresses apart. A channel named by the slug
        # alone before keeps its resource through the alias, unless its slug is shared.
        # Temporary, like `Placement.moved_from` (same removal condition): drop it once
        # every stack that had slug-named channels has run `pulumi up` with it.
        old_name = placement.name(f"alert-email-{slug}")
        channel = gcp.monitoring.NotificationChannel(
            placement.name(f"alert-email-{slug}-{_digest(email)}"),
            gcp.monitoring.NotificationChannelArgs(
                project=config.project,
                type="email",
                display_name=f"{placement.prefix} alerts: {email}",
                labels={"email_address": email},
            ),
            opts=pulumi.ResourceOptions.merge(
                scope.opts(),
                pulumi.ResourceOptions(
                    aliases=[pulumi.Alias(name=old_name)] if slugs.count(slug) == 1 else []
                ),
            ),
        )
        channels.append(channel.name)
    return tuple(channels)


def _email_slug(email: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", email.lower())


def _digest(text: str) -> str:
    """Ten hex digits of the SHA-256 of `text`: distinct for distinct configured values."""
    return hashlib.sha256(text.encode()).hexdigest()[:10]
