"""The redaction scanner: each category trips on its shapes and stays quiet on ordinary text."""

from __future__ import annotations

import pytest

from singularity.journal.redaction import CATEGORIES, scan

HITS = [
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nabc", "private_key"),
    ("-----BEGIN EC PRIVATE KEY-----", "private_key"),
    ("Authorization: Bearer abcdefghijklmnop1234", "bearer_token"),
    ("the key is sk-proj-abcdefghijklmnopqrstuvwx", "api_token"),
    ("ghp_" + "A1" * 18, "api_token"),
    ("xoxb-123456789012-abcdefghij", "api_token"),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "api_token",
    ),
    ("AKIAIOSFODNN7EXAMPLE", "cloud_key"),
    ("AIza" + "b" * 35, "cloud_key"),
    ("AccountKey=" + "Q" * 44, "cloud_key"),
    ("password=hunter2", "password"),
    ("db_passwd: correct-horse", "password"),
    ("api_key = 12345abcdef", "password"),
    ("mail jane.doe+work@mail.example.co.uk later", "email"),
    ("call +1 415 555 0132 tonight", "phone_number"),
    ("(415) 555-0132", "phone_number"),
    ("+48123456789", "phone_number"),
    ("card 4111 1111 1111 1111 exp 12/29", "card_number"),
    ("5500-0000-0000-0004", "card_number"),
    ("378282246310005", "card_number"),
]
CLEAN = [
    "I felt uneasy about the budget today, and I am not sure why.",
    "On 2026-11-29 at 10:30 I spent 0.0042 USD on 1,234 tokens.",
    "my token budget is low; the password reset flow confused me",
    "version 1.2.3 of the gateway, cycle 42, balance 9.99",
    "4111 1111 1111 1112 is not a valid card number",
    "between 2026-11-29 and 2026-12-01 nothing happened",
    "an @mention is not an address",
]


@pytest.mark.parametrize(("text", "category"), HITS)
def test_each_category_trips(text: str, category: str) -> None:
    assert category in scan(text)


@pytest.mark.parametrize("text", CLEAN)
def test_ordinary_reflections_pass(text: str) -> None:
    assert scan(text) == []


def test_every_category_is_covered() -> None:
    assert {category for _, category in HITS} == set(CATEGORIES)
