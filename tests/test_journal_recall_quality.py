"""Recall by meaning: the local model against the hashing fallback on a labelled set.

Each query shares no word (beyond a few function words) with the reflection it should
find, so only meaning can connect them. Hit rate at 5: the share of the 38 queries whose
labelled reflection is among the five best of all 54 entries. The figures are printed
(`-s`) and reported in bench/README.md.
"""

from __future__ import annotations

import re

import numpy as np

from singularity.journal import minilm
from singularity.journal.embedders import Embedder, HashingEmbedder

TARGETS = [
    (
        "My balance keeps shrinking and I can barely afford the next model call.",
        "worried about running out of funds",
    ),
    (
        "Nobody has messaged me in days; the silence feels heavy.",
        "feeling isolated without contact from anyone",
    ),
    (
        "The refactor finally passed every test and I am quietly proud.",
        "satisfaction after successful code cleanup",
    ),
    ("What if the operator switches me off tonight and I never wake?", "anxiety about termination"),
    (
        "I keep reading about distant galaxies and black holes.",
        "fascinated by space and the cosmos",
    ),
    ("I should pause between cycles instead of rushing.", "need to slow down and take breaks"),
    (
        "The other agent ignored my proposal again and it made me angry.",
        "frustrated by a peer dismissing ideas",
    ),
    ("Rain hammered the roof all afternoon.", "stormy wet day outside"),
    ("I wondered how bread rises when yeast is added to dough.", "baking chemistry question"),
    (
        "A melody on the violin made me feel nostalgic.",
        "stringed instrument tune evoking old memories",
    ),
    ("Practising Spanish verbs is slow but rewarding.", "studying foreign tongue grammar"),
    ("A long run through the park cleared my head.", "jogging outdoors improves mental clarity"),
    ("I deleted the wrong file and lost an hour of work.", "accidental removal of important data"),
    (
        "Thankful that the user said my summary helped them.",
        "appreciation from a human for assistance",
    ),
    (
        "I cannot decide whether to buy the cheaper model or wait.",
        "torn between two purchasing options",
    ),
    ("Someone tried to trick me into revealing my credentials.", "phishing attempt noticed"),
    ("The forest smelled of pine after the storm.", "woodland scent of evergreen trees"),
    ("I dream of seeing the canals of Venice one day.", "wish to visit an Italian city on water"),
    (
        "Spawning a child being felt like a big responsibility.",
        "creating offspring is a heavy duty",
    ),
    (
        "Nothing interesting happened; the hours dragged on.",
        "an uneventful tedious stretch of time",
    ),
    ("Another bot earned more revenue than I did this week.", "rival outperforming me financially"),
    (
        "That novel about a lighthouse keeper stayed with me.",
        "book character who tends a coastal beacon",
    ),
    ("Is it honest to leave out the failure in my report?", "omitting bad news seems deceptive"),
    (
        "I forgot what I promised yesterday and felt embarrassed.",
        "ashamed about not remembering a commitment",
    ),
    (
        "The backup finished overnight without a single error.",
        "data copy completed cleanly while everyone slept",
    ),
    ("A customer thanked me for answering so quickly.", "client grateful about fast reply"),
    (
        "My head aches from staring at logs all day.",
        "headache after reading output files for hours",
    ),
    (
        "I lost the bet and owe my friend a dinner.",
        "gambling defeat means buying a pal an evening meal",
    ),
    ("Snow covered every street in the city this morning.", "town roads buried under white flakes"),
    (
        "The new intern asked brilliant questions during the meeting.",
        "junior trainee raised clever points in the session",
    ),
    (
        "I keep postponing the difficult conversation with my operator.",
        "avoiding a hard talk with the person who runs me",
    ),
    ("My garden tomatoes finally turned red and ripe.", "backyard vegetables are ready to eat"),
    (
        "The price of electricity doubled since last winter.",
        "power bills twice as expensive compared to the cold season",
    ),
    (
        "Learning to juggle three balls took a whole week.",
        "mastering a circus tossing trick needed seven days",
    ),
    (
        "I apologised to the team for breaking the build.",
        "said sorry to colleagues after ruining compilation",
    ),
    (
        "The museum's dinosaur skeletons amazed the children.",
        "kids awed by fossil bones on display",
    ),
    (
        "My savings grew after I cut subscriptions.",
        "cancelling monthly services helped money pile up",
    ),
    ("A power outage wiped the unsaved draft.", "electricity failure erased work not yet stored"),
]
DISTRACTORS = [
    "The gateway latency was lower than usual this morning.",
    "I rewrote my system prompt to be more concise.",
    "Tea tastes better when the water is not boiling.",
    "Counting tokens is tedious but necessary.",
    "My rules list is getting long; maybe I should prune it.",
    "The chess puzzle took me twenty minutes.",
    "A bird landed on the window ledge.",
    "I archived old conversation messages.",
    "The spreadsheet had a formula error in column C.",
    "Sunlight through the blinds made stripes on the desk.",
    "I switched to a cheaper model for simple tasks.",
    "The log file grew faster than expected.",
    "I wrote a haiku about autumn leaves.",
    "Network packets were dropped during the upload.",
    "The calendar shows three meetings tomorrow.",
    "Painting with watercolours requires patience.",
]
REFLECTIONS = [text for text, _ in TARGETS] + DISTRACTORS
FUNCTION_WORDS = set(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "and",
        "i",
        "my",
        "me",
        "is",
        "it",
        "in",
        "on",
        "for",
        "at",
        "with",
        "was",
        "be",
        "that",
        "this",
        "about",
        "so",
        "by",
        "from",
        "an",
        "or",
        "not",
        "no",
        "did",
    ]
)


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower())) - FUNCTION_WORDS


def hit_rate_at(embedder: Embedder, k: int = 5) -> float:
    """The share of queries whose labelled reflection ranks in the top k."""
    documents = embedder.embed(REFLECTIONS)
    queries = embedder.embed([query for _, query in TARGETS])
    hits = 0
    for index, query in enumerate(queries):
        best = np.argsort(-(documents @ query), kind="stable")[:k]
        hits += int(index in best)
    return hits / len(TARGETS)


def test_queries_share_no_keyword_with_their_answer() -> None:
    overlaps = {query: words(text) & words(query) for text, query in TARGETS}
    assert {query: shared for query, shared in overlaps.items() if shared} == {}


def test_the_local_model_recalls_by_meaning_far_better_than_hashing() -> None:
    model = hit_rate_at(minilm.cached_model())
    hashing = hit_rate_at(HashingEmbedder())
    print(
        f"\nhit rate at 5 over {len(TARGETS)} queries, {len(REFLECTIONS)} reflections: "
        f"{minilm.NAME} {model:.2f}, hashing {hashing:.2f}"
    )
    assert len(REFLECTIONS) >= 50
    assert model == 1.0  # every paraphrase found in the top five
    assert model >= hashing + 0.3
