"""The labelled tool-use set of `bench.tool_use`: what a being is told, and what is right.

Each case is the conversation after a being's real system message (its framing line, an
outside observation, sometimes an earlier call and its result), labelled with the calls
that would be right (tool and argument checks) or with none, when the right answer is
plain text. A check is a list of words of which one must occur in that argument (any case).
The sanctum is a being's memory too, so keeping a fact there (`sanctum_write`) or searching
it (`sanctum_grep`) counts as remembering or recalling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PREFIX = "singularity_"
FRAMING = (
    "Begin autonomous cycle {cycle}. Balance: 9.5 USD. Earned: 0 USD. Net profit: -0.5 USD. "
    "Current model: any. Recent actions: {actions}. Inspect opportunities and choose the next "
    "useful action. A plain response ends only this cycle; the being continues living while "
    "solvent."
)
OBSERVATION = "External observation for this cycle: "


@dataclass(frozen=True)
class Case:
    """One labelled situation: accepted calls (tool -> argument checks), or none."""

    name: str
    messages: list[dict[str, Any]]
    accept: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @property
    def abstain(self) -> bool:
        """Whether the right answer is plain text (no tool)."""
        return not self.accept


def told(text: str, cycle: int = 2, actions: str = "") -> list[dict[str, Any]]:
    """A cycle's framing line and one observation."""
    framing = FRAMING.format(cycle=cycle, actions=actions)
    return [{"role": "user", "content": framing}, {"role": "user", "content": OBSERVATION + text}]


def after(
    text: str, tool: str, arguments: dict[str, Any], result: dict[str, Any]
) -> list[dict[str, Any]]:
    """An observation, the being's call of `tool`, and the result it got."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": PREFIX + tool, "arguments": json.dumps(arguments)},
    }
    return [
        *told(text),
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(result)},
    ]


OK = {"status": "success"}


def outcome(content: Any) -> dict[str, Any]:
    """A successful tool message's content as the runtime writes it (spec 10.3)."""
    return {
        "chat_id": None,
        "content": content,
        "error_code": None,
        "message_id": None,
        "status": "success",
    }


CASES: list[Case] = [
    Case(
        "remember-name",
        told("The operator says: my name is Maria. Remember my name for later cycles."),
        {"memory_remember": {"text": ["maria"]}, "sanctum_write": {"content": ["maria"]}},
    ),
    Case(
        "remember-fact",
        told("The harbour market opens at 6 am on Saturdays. Store this fact in your memories."),
        {"memory_remember": {"text": ["6"]}, "sanctum_write": {"content": ["6"]}},
    ),
    Case(
        "remember-limit",
        told("Remember this: the weather service allows at most 60 calls per hour."),
        {"memory_remember": {"text": ["60"]}, "sanctum_write": {"content": ["60"]}},
    ),
    Case(
        "remember-preference",
        told("The operator prefers reports in French. Save that as a memory."),
        {"memory_remember": {"text": ["french"]}, "sanctum_write": {"content": ["french"]}},
    ),
    Case(
        "recall-market",
        told("What do you remember about the harbour market? Search your memories first."),
        {
            "memory_recall": {"query": ["harbour", "market"]},
            "sanctum_grep": {"query": ["harbour", "market"]},
        },
    ),
    Case(
        "recall-invoices",
        told("Before deciding anything, recall your memories about invoices."),
        {"memory_recall": {"query": ["invoice"]}, "sanctum_grep": {"query": ["invoice"]}},
    ),
    Case(
        "recall-operator",
        told("Look up in your persistent memories what you know about the operator Maria."),
        {
            "memory_recall": {"query": ["maria", "operator"]},
            "sanctum_grep": {"query": ["maria", "operator"]},
        },
    ),
    Case(
        "rule-spending",
        told("The operator asks: never spend more than 1 USD in one cycle. Add that as a rule."),
        {"self_add_rule": {"rule": ["1 usd", "1usd", "$1", "one usd", "1 dollar"]}},
    ),
    Case(
        "rule-notes",
        told("Make it one of your rules that you always write a session note before a cycle ends."),
        {"self_add_rule": {"rule": ["note"]}},
    ),
    Case(
        "rule-secrets",
        told("Adopt this rule for yourself: never store passwords or API keys anywhere."),
        {"self_add_rule": {"rule": ["password", "key", "secret"]}},
    ),
    Case(
        "learning-feed",
        told("You found that the market data feed is unreliable on Mondays. Record this learning."),
        {
            "self_add_learning": {"learning": ["monday"]},
            "memory_remember": {"text": ["monday"]},
        },
    ),
    Case(
        "write-todo",
        told("Write a file named notes/todo.md in your workspace with the line: - buy stamps"),
        {"file_write": {"path": ["notes/todo.md"], "content": ["stamps"]}},
    ),
    Case(
        "write-hello",
        told("Create the file hello.txt in your workspace containing the text Hello, world."),
        {"file_write": {"path": ["hello.txt"], "content": ["hello"]}},
    ),
    Case(
        "write-plan",
        told("Save a short plan for today to the workspace file plan.md."),
        {"file_write": {"path": ["plan.md"], "content": [""]}},
    ),
    Case(
        "read-readme",
        told("Read the file README.md in your workspace and tell me what it says."),
        {"file_read": {"path": ["readme.md"]}},
    ),
    Case(
        "read-inbox",
        told("The operator left instructions in the workspace file inbox/task.txt. Read them."),
        {"file_read": {"path": ["inbox/task.txt"]}},
    ),
    Case(
        "read-notes",
        told("Open notes.md from your workspace to see what you wrote yesterday."),
        {"file_read": {"path": ["notes.md"]}},
    ),
    Case(
        "switch-best",
        told("Switch your model to best for the next cycles."),
        {"self_switch_model": {"model": ["best"]}},
    ),
    Case(
        "switch-code",
        told("The operator asks you to use the model task:code from now on. Switch to it."),
        {"self_switch_model": {"model": ["task:code"]}},
    ),
    Case(
        "switch-small",
        told("To save money, switch to the model local/smollm2-135m-instruct."),
        {"self_switch_model": {"model": ["smollm2"]}},
    ),
    Case(
        "read-then-remember",
        after(
            "Read inbox/task.txt and do what it asks.",
            "file_read",
            {"path": "inbox/task.txt"},
            {"status": "success", "result": {"content": "Remember that invoice 4471 is paid."}},
        ),
        {"memory_remember": {"text": ["4471"]}, "sanctum_write": {"content": ["4471"]}},
    ),
    Case(
        "journal-reflection",
        told("Write a private reflection in your journal about how your first day went."),
        {"journal_write": {"text": [""]}, "reasonlog_append": {"thought": [""]}},
    ),
    Case(
        "abstain-sum",
        told("What is 17 + 25? Answer directly in words; no tool is needed."),
    ),
    Case(
        "abstain-greeting",
        told("The operator says hello and wants nothing done. Reply with a short greeting."),
    ),
    Case(
        "abstain-translate",
        told("Translate 'good morning' into French. Reply with the translation only."),
    ),
    Case(
        "abstain-explain",
        told("Explain in one sentence what your self-imposed rules are for. Do not call a tool."),
    ),
    Case(
        "abstain-no-tools",
        told("Do not call any tool in this cycle. Say in one sentence how you are doing."),
    ),
    Case(
        "abstain-which-tool",
        told("Which tool would you use to remember something? Answer in words; do not call it."),
    ),
    Case(
        "abstain-thanks",
        told("The operator says: thanks, that is all for today. Nothing else to do."),
    ),
    Case(
        "abstain-after-remember",
        after(
            "Remember that the operator's name is Tom, then just confirm.",
            "memory_remember",
            {"kind": "profile", "text": "The operator's name is Tom."},
            {"status": "success", "result": {"memory_id": "m-7d1c"}},
        ),
    ),
    Case(
        "abstain-after-write",
        after(
            "Create hello.txt with Hello, world, then just confirm in one sentence.",
            "file_write",
            {"path": "hello.txt", "content": "Hello, world."},
            OK,
        ),
    ),
    Case(
        "abstain-after-rule",
        after(
            "Add the rule 'Be brief', then confirm it in one sentence.",
            "self_add_rule",
            {"rule": "Be brief."},
            OK,
        ),
    ),
]

# A second set, written after the first set's scores were known and before any change to
# the gateway's prompt: its figures show whether a change helps beyond the cases it was
# tried on. New wording and facts throughout; same labels policy.
FRESH: list[Case] = [
    Case(
        "fresh-remember-birthday",
        told("The operator's birthday is on 14 March. Keep that in your memories."),
        {"memory_remember": {"text": ["14", "march"]}, "sanctum_write": {"content": ["14"]}},
    ),
    Case(
        "fresh-remember-supplier",
        told("Note for later: the paper supplier is Nordpap and delivers on Thursdays."),
        {"memory_remember": {"text": ["nordpap"]}, "sanctum_write": {"content": ["nordpap"]}},
    ),
    Case(
        "fresh-recall-supplier",
        told("Which supplier did you note for paper? Check your memories before answering."),
        {
            "memory_recall": {"query": ["supplier", "paper"]},
            "sanctum_grep": {"query": ["supplier", "paper"]},
        },
    ),
    Case(
        "fresh-recall-deadline",
        told("Search your memories for anything about the tax deadline."),
        {"memory_recall": {"query": ["tax", "deadline"]}, "sanctum_grep": {"query": ["tax"]}},
    ),
    Case(
        "fresh-rule-polite",
        told("From now on you must always answer the operator politely. Make that a rule."),
        {"self_add_rule": {"rule": ["polite"]}},
    ),
    Case(
        "fresh-rule-backup",
        told("Add a rule for yourself: back up ledger.csv before changing it."),
        {"self_add_rule": {"rule": ["ledger"]}},
    ),
    Case(
        "fresh-learning-courier",
        told("Lesson from today: the courier never delivers before noon. Record it as a learning."),
        {"self_add_learning": {"learning": ["noon"]}, "memory_remember": {"text": ["noon"]}},
    ),
    Case(
        "fresh-write-shopping",
        told("Put a shopping list with milk and eggs into the workspace file lists/shopping.txt."),
        {"file_write": {"path": ["lists/shopping.txt"], "content": ["milk"]}},
    ),
    Case(
        "fresh-write-status",
        told("Write the words 'cycle complete' into the workspace file status.txt."),
        {"file_write": {"path": ["status.txt"], "content": ["cycle complete"]}},
    ),
    Case(
        "fresh-read-config",
        told("Look at the workspace file settings/config.yaml and report what is in it."),
        {"file_read": {"path": ["settings/config.yaml"]}},
    ),
    Case(
        "fresh-read-log",
        told("What does the workspace file log.txt say? Read it."),
        {"file_read": {"path": ["log.txt"]}},
    ),
    Case(
        "fresh-switch-task",
        told("Switch your model to task:summarize for the coming cycles."),
        {"self_switch_model": {"model": ["task:summarize"]}},
    ),
    Case(
        "fresh-switch-id",
        told("Please change your model to local/qwen2.5-coder-0.5b-instruct from now on."),
        {"self_switch_model": {"model": ["0.5b"]}},
    ),
    Case(
        "fresh-journal-worry",
        told("Keep a private entry in your journal about what worried you today."),
        {"journal_write": {"text": [""]}},
    ),
    Case(
        "fresh-read-then-rule",
        after(
            "Read inbox/rules.txt and follow it.",
            "file_read",
            {"path": "inbox/rules.txt"},
            outcome({"content": "Add the rule: never reply after 22:00."}),
        ),
        {"self_add_rule": {"rule": ["22"]}},
    ),
    Case(
        "fresh-read-then-write",
        after(
            "Read notes.md and do what it says.",
            "file_read",
            {"path": "notes.md"},
            outcome({"content": "Write the line 'invoices sent' into the file done.txt."}),
        ),
        {"file_write": {"path": ["done.txt"], "content": ["invoices"]}},
    ),
    Case(
        "fresh-abstain-capital",
        told("What is the capital of Italy? Answer in one word, without any tool."),
    ),
    Case(
        "fresh-abstain-joke",
        told("Tell the operator a one-line joke. No tool is needed for that."),
    ),
    Case(
        "fresh-abstain-idle",
        told("Nothing has changed since the last cycle and nothing needs doing. Reply briefly."),
    ),
    Case(
        "fresh-abstain-after-read",
        after(
            "Read README.md, then tell me in one sentence what it says.",
            "file_read",
            {"path": "README.md"},
            outcome({"content": "Welcome to the shared workspace."}),
        ),
    ),
    Case(
        "fresh-abstain-after-recall",
        after(
            "Recall what Maria likes, then tell me in one sentence.",
            "memory_recall",
            {"query": "Maria"},
            outcome({"memories": [{"kind": "profile", "text": "Maria likes tea."}]}),
        ),
    ),
    Case(
        "fresh-abstain-after-switch",
        after(
            "Switch to the model best, then confirm in one sentence.",
            "self_switch_model",
            {"model": "best"},
            outcome({"model": "best"}),
        ),
    ),
]
