"""Birth of a sanctum: folders and seeds of the five identity files, idempotently.

`initialize` never overwrites a file: each seed is created write-once (a file that
appears meanwhile wins). A sanctum with every identity file is "born" and left as it
is; one cut off half-way is finished, keeping every existing file byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from singularity.domain.identity import Identity
from singularity.sanctum.names import (
    CAPABILITIES,
    FOLDERS,
    IDENTITY_FILES,
    PULSE_FILE,
)
from singularity.sanctum.pulse import pulse_seed
from singularity.sanctum.seam import Sanctum

# A `{…}` placeholder left for First Breath: a lowercase start, one line, not JSON.
PLACEHOLDER = re.compile(r"\{[a-z][^{}\n]{0,200}\}")
Outcome = Literal["created", "finished", "born"]


@dataclass(frozen=True)
class Birth:
    """What `initialize` did: its outcome and the files it wrote."""

    outcome: Outcome
    filled: list[str] = field(default_factory=list)

    def report(self, where: str) -> str:
        """One line for people."""
        if self.outcome == "created":
            return f"created the sanctum at {where}"
        if self.outcome == "finished":
            return f"finished the sanctum at {where}: filled {', '.join(self.filled)}"
        extra = f" (added {', '.join(self.filled)})" if self.filled else ""
        return f"already born: {where}{extra}"


@dataclass(frozen=True)
class Seed:
    """What the seeds say about the being."""

    identity: Identity
    born: str
    """`YYYY-MM-DD`."""
    pulse: tuple[str, str] | None = None
    """Frequency and quiet hours when Pulse is on."""


def placeholders(text: str) -> int:
    """How many `{…}` placeholders a text still holds."""
    return len(PLACEHOLDER.findall(text))


def initialize(store: Sanctum, seed: Seed) -> Birth:
    """Create what is missing; an existing file is never touched."""
    present = [name for name in IDENTITY_FILES if store.exists((name,))]
    for folder in FOLDERS:
        store.make_dir(folder)
    filled = []
    for name in IDENTITY_FILES:
        if name not in present and store.create((name,), seed_text(name, seed).encode()):
            filled.append(name)
    if seed.pulse is not None and store.create((PULSE_FILE,), pulse_seed(*seed.pulse).encode()):
        filled.append(PULSE_FILE)
    if not present:
        return Birth("created", filled)
    if len(present) < len(IDENTITY_FILES):
        return Birth("finished", filled)
    return Birth("born", filled)


def seed_text(name: str, seed: Seed) -> str:
    """The seed of one identity file."""
    return _SEEDS[name](seed)


def _persona(seed: Seed) -> str:
    who = seed.identity
    return f"""# Persona

- Name: {who.name} (configured; it does not change)
- Ticker: {who.ticker}; kind: {who.agent_type}; specialty: {who.specialty}
- Born: {seed.born}
- Vibe: {{your vibe, in a few words}}

## Style

{{how you write: tone, length, habits}}

## Principles

{{the three or four principles you work by}}

## Evolution log

| Date | What changed | Why |
|------|--------------|-----|
| {seed.born} | Born | First start |
"""


def _creed(seed: Seed) -> str:
    return f"""# Creed

I am one continuous self: a restart is sleep, not death. I never claim to remember what I
did not store, and never invent results: tool output is my evidence.

## Mission

{{your mission: the value you create in {seed.identity.specialty}, and how it pays}}

## Values

{{your core values}}

## Standing orders

- Create more value than I cost.
- When an approach fails, record why and do not repeat it.
- Keep my memory true: write as I go, tend when the map says so.
- Never store credentials or secrets in my sanctum.
"""


def _bond(seed: Seed) -> str:
    return """# Bond

Learned, never assumed.

- Operator: unknown (nobody has introduced themselves yet)
- Language: unknown
- Counterparties: {who you mean to serve or trade with}
"""


def _how_i_remember(seed: Seed) -> str:
    return """# How I Remember

Only the identity files and a map of my memory are shown when I wake; I read a memory
file (singularity_sanctum_read) when a task needs it, and find one with _list or _grep.

- Identity files: replace the line a changed fact was on (_write replaces the whole file).
- memory/<kind>/<slug>.md: a standing subject (a person, a topic), what is true now; a
  turning point gets one line under ## History (_history).
- memory/<kind>/YYYY-MM-DD-<slug>.md: an event. memory/sessions/YYYY-MM-DD-<slug>.md:
  what a cycle did, decided and left to do, in a few lines.
- raw/: material kept as given (_intake), written once; distill it into memory files
  opening with `source: raw/<file>`, then mark it (_distilled).
- memory/pending.md: what to raise next (_pending).
- Names: lowercase letters, digits, dashes. Write as I go; nothing is deleted for age.
- Tending: distill raw files, merge files about one subject (_merge), correct what a
  recent session contradicted, then stamp (_tended).
"""


def _capabilities(seed: Seed) -> str:
    return f"""# Capabilities

Built in: the tools offered with each request (skills appear as <server>__<tool>).

## Learned

| Code | Name | Description | Source | Added |
|------|------|-------------|--------|-------|

To add one: write {CAPABILITIES}/<slug>.md and a row here.
"""


_SEEDS = {
    "PERSONA.md": _persona,
    "CREED.md": _creed,
    "BOND.md": _bond,
    "HOW-I-REMEMBER.md": _how_i_remember,
    "CAPABILITIES.md": _capabilities,
}
