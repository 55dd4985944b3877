"""The redaction scanner on a labelled set, both ways.

Every secret or personal datum of the set is caught in its category, and every ordinary
reflection of the set (timestamps, times, versions, addresses of machines, amounts,
colons after "auth" or "secret" in plain prose, digests) passes untouched.
"""

from __future__ import annotations

import pytest

from singularity.journal.redaction import CATEGORIES, scan

SECRETS = [
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nabc", "private_key"),
    ("-----BEGIN EC PRIVATE KEY-----", "private_key"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow", "private_key"),
    ("Authorization: Bearer abcdefghijklmnop1234", "bearer_token"),
    ("the key is sk-proj-abcdefghijklmnopqrstuvwx", "api_token"),
    ("ghp_" + "A1" * 18, "api_token"),
    ("xoxb-123456789012-abcdefghij", "api_token"),
    ("glpat-abcdefghij0123456789", "api_token"),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "api_token"),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "api_token",
    ),
    ("AKIAIOSFODNN7EXAMPLE", "cloud_key"),
    ("aws secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY for the bucket", "cloud_key"),
    ("the secret key: Je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY.", "cloud_key"),
    ("AIza" + "b" * 35, "cloud_key"),
    ("AccountKey=" + "Q" * 44, "cloud_key"),
    ("password=hunter2", "password"),
    ("password=sunshine", "password"),
    ("db_passwd: correct-horse", "password"),
    ("api_key = 12345abcdef", "password"),
    ("my password: Tr0ub4dor&3", "password"),
    ("token: aVeryLongOpaqueValue", "password"),
    ("mail jane.doe+work@mail.example.co.uk later", "email"),
    ("write to ops@example.org", "email"),
    ("call +1 415 555 0132 tonight", "phone_number"),
    ("(415) 555-0132", "phone_number"),
    ("+48123456789", "phone_number"),
    ("ring 020 7946 0958 after lunch", "phone_number"),
    ("card 4111 1111 1111 1111 exp 12/29", "card_number"),
    ("5500-0000-0000-0004", "card_number"),
    ("378282246310005", "card_number"),
    ("pay to DE89 3704 0044 0532 0130 00 by Friday", "bank_account"),
    ("IBAN GB82WEST12345698765432", "bank_account"),
    ("FR14 2004 1010 0505 0001 3M02 606", "bank_account"),
]
ORDINARY = [
    "I felt uneasy about the budget today, and I am not sure why.",
    "On 2026-11-29 at 10:30 I spent 0.0042 USD on 1,234 tokens.",
    "The meeting on 2026-12-01 18:44 went badly.",
    "2026-12-01T18:44:05Z cycle 12 ended; next at 2026-12-01T18:49:05+01:00",
    "between 18:44 and 19:05:30 the gateway was slow",
    "Auth: failed, again, and I do not know why.",
    "Secret: nobody knows what the operator wants.",
    "Token: spent. Password: forgotten. Auth: denied.",
    "my token budget is low; the password reset flow confused me",
    "version 1.2.3 of the gateway, cycle 42, balance 9.99",
    "the server at 192.168.100.200 and 10.0.0.1 answered",
    "4111 1111 1111 1112 is not a valid card number",
    "between 2026-11-29 and 2026-12-01 nothing happened",
    "an @mention is not an address",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 fixed it",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "I earned 1 000 000 microdollars over 12 345 cycles",
    "the code DE12 is a label, not an account",
    "On 01/12/2026 I wrote 3 notes.",
    "ratio 3:2, then 16:9 screens",
]


@pytest.mark.parametrize(("text", "category"), SECRETS)
def test_each_secret_is_caught_in_its_category(text: str, category: str) -> None:
    assert category in scan(text)


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_reflections_pass_untouched(text: str) -> None:
    assert scan(text) == []


def test_the_labelled_set_is_exact_both_ways() -> None:
    caught = sum(category in scan(text) for text, category in SECRETS)
    blanked = sum(bool(scan(text)) for text in ORDINARY)
    print(f"\nsecrets caught {caught}/{len(SECRETS)}, ordinary blanked {blanked}/{len(ORDINARY)}")
    assert (caught, blanked) == (len(SECRETS), 0)


def test_every_category_is_covered() -> None:
    assert {category for _, category in SECRETS} == set(CATEGORIES)
