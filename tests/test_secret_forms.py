"""The scrubber looks for the forms that hold no other form, and replaces as it always
did: every form of every secret, longest first, on text where forms of several secrets
overlap (decision 32)."""

from __future__ import annotations

import base64
import json
import random

from hypothesis import given
from hypothesis import strategies as st

from singularity.secrets import MIN_FORM_CHARS, SECRET_MARKER, Scrubber

# One secret inside another, one whose JSON escape differs, one whose base64 holds `+/`.
SECRETS = ["tok-12345678", "12345678", 'pa"ss\\word', "\xfb\xef\xbe?>~key"]


def _all_forms(value: str) -> set[str]:
    """Every form the scrubber withholds, as spec'd: plain, JSON-escaped, and base64 alone
    and at the three alignments inside longer base64, in both alphabets."""
    data = value.encode("utf-8", "replace")
    forms = {value, json.dumps(value, ensure_ascii=False)[1:-1], base64.b64encode(data).decode()}
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode()
        start, end = (4 if offset else 0), (offset + len(data)) // 3 * 4
        if end - start >= 8:
            forms.add(encoded[start:end])
    forms |= {form.replace("+", "-").replace("/", "_") for form in forms}
    return {form for form in forms if len(form) >= MIN_FORM_CHARS}


def _replaced_form_by_form(values: list[str], text: str) -> str:
    """The replacement one form at a time, longest first (ties by text): what `text` gives."""
    forms = sorted(set().union(*map(_all_forms, values)), key=lambda form: (-len(form), form))
    for form in forms:
        text = text.replace(form, SECRET_MARKER)
    return text


def _found_form_by_form(values: list[str], data: str) -> bool:
    return any(form in data for form in set().union(*map(_all_forms, values)))


def _overlapping_text(values: list[str], rng: random.Random) -> str:
    """Forms of the secrets, cut and joined so that they overlap, with text between."""
    forms = sorted(set().union(*map(_all_forms, values)))
    pieces = []
    for _ in range(rng.randint(1, 12)):
        form = rng.choice(forms)
        cut = rng.randint(0, len(form))
        pieces.append(rng.choice([form, form[:cut], form[cut:], "x", "", '"', "+/="]))
    return "".join(pieces)


def test_several_overlapping_secrets_are_replaced_as_form_by_form() -> None:
    scrubber = Scrubber(SECRETS)
    assert len(scrubber._least) < len(scrubber._forms)  # fewer looks than forms
    text = "a tok-123456789 b " + base64.b64encode(SECRETS[3].encode()).decode() + ' pa\\"ss'
    text += "\\\\word tok-12tok-12345678"
    scrubbed = scrubber.text(text)
    assert scrubbed == _replaced_form_by_form(SECRETS, text)
    assert scrubbed == (
        f"a {SECRET_MARKER}9 b {SECRET_MARKER} {SECRET_MARKER} tok-12{SECRET_MARKER}"
    )
    clean = "nothing secret here: tok-1234567 and 1234567"
    assert scrubber.text(clean) is clean
    assert not scrubber.found_in(clean) and not scrubber.found_in(clean.encode())


@given(st.randoms(use_true_random=False), st.integers(min_value=1, max_value=len(SECRETS)))
def test_any_text_of_overlapping_forms_is_found_and_replaced_as_form_by_form(
    rng: random.Random, count: int
) -> None:
    values = rng.sample(SECRETS, count)
    scrubber = Scrubber(values)
    for _ in range(20):
        text = _overlapping_text(SECRETS, rng)
        assert scrubber.text(text) == _replaced_form_by_form(values, text)
        assert scrubber.found_in(text) == _found_form_by_form(values, text)
        encoded = text.encode("utf-8", "replace")
        assert scrubber.found_in(encoded) == any(
            form.encode("utf-8", "replace") in encoded
            for form in set().union(*map(_all_forms, values))
        )
