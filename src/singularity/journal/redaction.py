"""The redaction scanner: secrets and personal data are flagged and blanked before writing.

Deterministic patterns only, so it can be tested and cannot be talked out of a finding.
A hit names its category, never the matched text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----", re.I)
_BEARER = re.compile(r"\bbearer\s+[A-Za-z0-9._~+/=-]{16,}", re.I)
_TOKEN_SHAPES = re.compile(
    r"\b(?:"
    r"sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI / Anthropic style secret keys
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
    r"|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_-]{40,}"
    r")"
)
_CLOUD_KEYS = re.compile(
    r"\b(?:"
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}"  # AWS access key ids
    r"|AIza[A-Za-z0-9_-]{35}"  # Google API keys
    r"|ya29\.[A-Za-z0-9_-]{20,}"  # Google OAuth access tokens
    r"|AccountKey=[A-Za-z0-9+/=]{40,}"  # Azure storage
    r"|SharedAccessSignature=[^\s;]{20,}"
    r"|DefaultEndpointsProtocol=[^\s]*AccountKey="
    r")"
)
# `key=value` or `key: value` after a credential word. In `=` form (configuration, code)
# any value counts; after a colon (prose: "Auth: failed") only a value shaped like a
# credential does: a digit or symbol in it, mixed case, or 12 characters and more.
_PASSWORD = re.compile(
    r"(?<![A-Za-z])(?:password|passwd|passphrase|pwd|secret|api[_-]?key|access[_-]?key|token|auth)"
    r"\s*(?P<sign>[:=])\s*(?!\s)[\"']?(?P<value>[^\s\"']{3,})",
    re.I,
)
_TRAILING = ".,;:!?)]}"
# An AWS secret access key (and keys like it): 40 characters of base64 with upper and
# lower case and a digit or `/` or `+`; hex digests (one case only) are not matched.
_SECRET_40 = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Za-z0-9])"
)
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]\d{2,4}){1,4}(?!\w)"
    r"|(?<![\w+])\+\d{9,14}(?!\w)"
)
_CARD = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")
# Dates, times and IPv4 addresses are taken out before phone numbers are looked for.
_NOT_PHONE = re.compile(
    r"\d{4}[-./]\d{1,2}[-./]\d{1,2}"
    r"(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\d{1,2}[-./]\d{1,2}[-./]\d{2,4}"
    r"|(?<![\d.])\d{1,2}:\d{2}(?::\d{2})?(?![\d:])"
    r"|(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])"
)


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _has_card(text: str) -> bool:
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group(0))
        if 13 <= len(digits) <= 19 and len(set(digits)) > 1 and _luhn(digits):
            return True
    return False


def _has_phone(text: str) -> bool:
    for match in _PHONE.finditer(_NOT_PHONE.sub(" ", text)):
        digits = re.sub(r"\D", "", match.group(0))
        if 9 <= len(digits) <= 15:
            return True
    return False


def _credential_like(value: str) -> bool:
    value = value.rstrip(_TRAILING)
    if len(value) < 3:
        return False
    if any(not char.isalpha() for char in value):
        return True
    return len(value) >= 12 or not (value.islower() or value.isupper() or value.istitle())


def _has_password(text: str) -> bool:
    for match in _PASSWORD.finditer(text):
        if match.group("sign") == "=" or _credential_like(match.group("value")):
            return True
    return False


def _has_secret_40(text: str) -> bool:
    for match in _SECRET_40.finditer(text):
        token = match.group(0)
        has_cases = any(c.isupper() for c in token) and any(c.islower() for c in token)
        if has_cases and any(c.isdigit() or c in "/+" for c in token):
            return True
    return False


def _has_iban(text: str) -> bool:
    for match in _IBAN.finditer(text):
        compact = match.group(0).replace(" ", "")
        if not 15 <= len(compact) <= 34:
            continue
        moved = compact[4:] + compact[:4]
        number = "".join(str(int(char, 36)) for char in moved)
        if int(number) % 97 == 1:
            return True
    return False


def _matches(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda text: pattern.search(text) is not None


CHECKS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("private_key", _matches(_PRIVATE_KEY)),
    ("bearer_token", _matches(_BEARER)),
    ("api_token", _matches(_TOKEN_SHAPES)),
    ("cloud_key", lambda text: _CLOUD_KEYS.search(text) is not None or _has_secret_40(text)),
    ("password", _has_password),
    ("email", _matches(_EMAIL)),
    ("card_number", _has_card),
    ("bank_account", _has_iban),
    ("phone_number", _has_phone),
)
CATEGORIES = tuple(name for name, _ in CHECKS)


def scan(text: str) -> list[str]:
    """The categories of secret or personal data found in the text (empty when clean)."""
    return [name for name, check in CHECKS if check(text)]
