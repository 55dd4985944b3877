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
_PASSWORD = re.compile(
    r"(?<![A-Za-z])(?:password|passwd|passphrase|pwd|secret|api[_-]?key|access[_-]?key|token|auth)"
    r"\s*[:=]\s*(?!\s)[\"']?[^\s\"']{3,}",
    re.I,
)
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]\d{2,4}){1,4}(?!\w)"
    r"|(?<![\w+])\+\d{9,14}(?!\w)"
)
_CARD = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")
_DATE_LIKE = re.compile(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./]\d{2,4}")


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
    for match in _PHONE.finditer(text):
        found = match.group(0).strip()
        digits = re.sub(r"\D", "", found)
        if 9 <= len(digits) <= 15 and not _DATE_LIKE.fullmatch(found):
            return True
    return False


def _matches(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda text: pattern.search(text) is not None


CHECKS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("private_key", _matches(_PRIVATE_KEY)),
    ("bearer_token", _matches(_BEARER)),
    ("api_token", _matches(_TOKEN_SHAPES)),
    ("cloud_key", _matches(_CLOUD_KEYS)),
    ("password", _matches(_PASSWORD)),
    ("email", _matches(_EMAIL)),
    ("card_number", _has_card),
    ("phone_number", _has_phone),
)
CATEGORIES = tuple(name for name, _ in CHECKS)


def scan(text: str) -> list[str]:
    """The categories of secret or personal data found in the text (empty when clean)."""
    return [name for name, check in CHECKS if check(text)]
