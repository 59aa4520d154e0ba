"""Recognising service accounts that must not run or call the handler.

Google-managed default accounts are shared by everything in a project and
usually hold Editor, so a token or runtime identity from one of them says
nothing about who is calling and grants far too much.
"""

from __future__ import annotations

_SHARED_SUFFIXES = {
    "-compute@developer.gserviceaccount.com": "the Compute Engine default service account",
    "@appspot.gserviceaccount.com": "the App Engine default service account",
    "@gcp-sa-cloudscheduler.iam.gserviceaccount.com": "the Cloud Scheduler service agent",
    "@cloudbuild.gserviceaccount.com": "the Cloud Build service account",
}


def shared_account_kind(email: str) -> str | None:
    """A description of the shared/default account `email` is, or None if it is dedicated."""
    lowered = email.strip().lower()
    for suffix, kind in _SHARED_SUFFIXES.items():
        if lowered.endswith(suffix):
            return kind
    return None


def member_email(member: str) -> str | None:
    """The email of an IAM member `serviceAccount:EMAIL`, else None."""
    kind, _, email = member.partition(":")
    return email.strip().lower() if kind == "serviceAccount" and email else None
