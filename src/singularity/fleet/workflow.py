"""The being's workflow: its life loop, its operator's updates, its status, its children.

The loop is the one of `singularity run`, kept by Temporal: visit the being (a worker opens
it and applies the operator's requests), and if it is due, solvent and not paused, live a
cycle in that visit; then sleep until the next cycle is due (the interval, longer after
failures, or Pulse's schedule, in workflow time) or until the operator asks something.
Only small values pass through the history (`singularity.fleet.messages`): the
conversation and the mind stay in the state store. Every few hundred events the workflow
continues as new with its carried state, so its history stays small over months.

Operator requests arrive as updates carrying the same operator requests as `singularity
say` and the console (validated before they are accepted, each applied once by its id);
the workflow keeps them until a visit reports them settled. A stop cancels a cycle in
flight (the being stops at its next safe point) and then puts the being to rest. Children
a being funds become child workflows that outlive their parent.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    from singularity.domain.operator import parse_request
    from singularity.errors import StateError
    from singularity.fleet.messages import (
        VISIT_ACTIVITY,
        WORKFLOW_NAME,
        BeingSpec,
        Carry,
        NewChild,
        Status,
        Visit,
        Visited,
    )
    from singularity.sanctum.pulse import QuietHours, Schedule
    from singularity.timestamps import parse_timestamp, render_timestamp

STICKY_START = timedelta(seconds=10)
"""How long a visit waits for the worker that holds the being before going elsewhere."""
HEARTBEAT = timedelta(seconds=20)
"""A visit that has not heartbeaten for this long is taken as lost (its worker died)."""
VISIT_LIMIT = timedelta(hours=2)
REOPEN_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
)
"""Reopening a being is tried until it works: its hold runs out, a worker comes back; a
visit that cannot succeed fails at once, non-retryable (a bad configuration, a refused
state)."""
ONCE = RetryPolicy(maximum_attempts=1)
KEPT_REPLIES = 32
WAITING_STATUSES = ("paused", "exhausted")
ENDED_STATUSES = ("stopped", "failed")


@workflow.defn(name=WORKFLOW_NAME)
class BeingWorkflow:
    """One being's life."""

    @workflow.init
    def __init__(self, carry: Carry) -> None:
        self.carry = carry
        self.woken = False
        self.visiting: workflow.ActivityHandle[Visited] | None = None

    @workflow.run
    async def run(self, carry: Carry) -> Status:
        """Live until stopped or failed."""
        while True:
            if self._history_full():
                # No wait for the handlers: an operator update never awaits, and a reply
                # waits for a cycle that only the loop can run, so its caller asks the next
                # run again (the message and the replies are carried).
                self.carry.runs += 1
                workflow.continue_as_new(self.carry)
            stopping = self.stopping
            visited = await self._visit(live=not stopping and self._due(), rest=stopping)
            self._absorb(visited)
            for child in visited.children:
                await self._start_child(child)
            if visited.status in ENDED_STATUSES:
                return self.status()
            await self._sleep()

    # The operator.

    @workflow.update
    async def operator(self, document: dict[str, Any]) -> dict[str, Any]:
        """Queue an operator request (the JSON of `singularity.domain.operator`)."""
        request = parse_request(document)
        known = {str(waiting.get("id")) for waiting in self.carry.requests}
        if request.id not in known:
            self.carry.requests.append(request.to_json())
        self.woken = True
        if request.kind == "stop" and self.visiting is not None:
            self.visiting.cancel()  # the cycle in flight stops at its next safe point
        return {"request_id": request.id, "kind": request.kind, "queued": True}

    @operator.validator
    def check_operator(self, document: dict[str, Any]) -> None:
        """Refuse a malformed request, and any request once a stop is queued."""
        try:
            parse_request(document)
        except StateError as error:
            raise ApplicationError(str(error), type="UsageError", non_retryable=True) from None
        if self.stopping:
            raise ApplicationError("the being is stopping", type="UsageError", non_retryable=True)

    @workflow.update(unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)
    async def reply(self, request_id: str) -> dict[str, str]:
        """Wait for the cycle that read a message, and answer its status and closing text."""
        await workflow.wait_condition(lambda: request_id in self.carry.replies)
        lived, _, text = self.carry.replies[request_id].partition("\n")
        return {"request_id": request_id, "status": lived, "reply": text}

    @reply.validator
    def check_reply(self, request_id: str) -> None:
        """Refuse to wait for a message this being was never sent (or whose reply is gone)."""
        waiting = any(
            document.get("kind") == "message" and document.get("id") == request_id
            for document in self.carry.requests
        )
        if not waiting and request_id not in self.carry.replies:
            raise ApplicationError(
                f"no message {request_id} is waiting for its cycle",
                type="UsageError",
                non_retryable=True,
            )

    @workflow.query
    def status(self) -> Status:
        """Where the being stands, as the last visit saw it."""
        last, carry = self.carry.last, self.carry
        waiting = [parse_request(document).describe() for document in carry.requests]
        return Status(
            key=carry.spec.key,
            status=last.status if last is not None else "starting",
            cycle=last.cycle if last is not None else 0,
            balance_usd=last.balance_usd if last is not None else "",
            earned_usd=last.earned_usd if last is not None else "",
            spent_usd=last.spent_usd if last is not None else "",
            waiting=waiting,
            worker=last.worker if last is not None and carry.resident else None,
            due_at=carry.due_at,
            cycles=carry.cycles,
            visits=carry.visits,
            runs=carry.runs,
            children=list(carry.children),
            lived=last.lived if last is not None else None,
            failure=last.failure if last is not None else None,
        )

    @property
    def stopping(self) -> bool:
        """Whether a stop is queued."""
        return any(document.get("kind") == "stop" for document in self.carry.requests)

    # The loop.

    def _history_full(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or (
            info.get_current_history_length() > self.carry.history_events
        )

    def _due(self) -> bool:
        """Whether the being should live a cycle in the next visit."""
        last = self.carry.last
        if last is None or last.status in WAITING_STATUSES:
            return False  # the first visit opens it; a waiting being waits
        if last.pulse is None and self._messages_waiting():
            return True  # a message starts the next cycle at once (not the next pulse)
        due = self.carry.due_at
        return due is None or parse_timestamp(due) <= workflow.now()

    def _messages_waiting(self) -> bool:
        return any(document.get("kind") == "message" for document in self.carry.requests)

    async def _sleep(self) -> None:
        """Wait until the next cycle is due or the operator asks something."""
        last = self.carry.last
        timeout: float | None = None
        if last is not None and last.status not in WAITING_STATUSES:
            if self._due():
                return
            due = parse_timestamp(self.carry.due_at or render_timestamp(workflow.now()))
            timeout = max(0.0, (due - workflow.now()).total_seconds())
        try:
            await workflow.wait_condition(lambda: self.woken, timeout=timeout)
        except TimeoutError:
            pass  # the cycle is due
        self.woken = False

    async def _visit(self, *, live: bool, rest: bool) -> Visited:
        """Visit the being where it is held, or anywhere it can be opened."""
        carry = self.carry
        visit = Visit(carry.spec, list(carry.requests), live=live, rest=rest)
        if carry.resident is not None:
            try:
                return await self._run_visit(visit, carry.resident, sticky=True)
            except ActivityError as error:
                if _refused(error):
                    raise
                if isinstance(error.cause, CancelledError):
                    # A stop cancelled the cycle; the being is still held there.
                    return await self._visit(live=False, rest=self.stopping)
                workflow.logger.info("the worker of %s did not answer: reopening", visit.spec.key)
                carry.resident = None
        return await self._run_visit(visit, carry.spec.task_queue, sticky=False)

    async def _run_visit(self, visit: Visit, queue: str, *, sticky: bool) -> Visited:
        self.visiting = workflow.start_activity(
            VISIT_ACTIVITY,
            visit,
            result_type=Visited,
            task_queue=queue,
            schedule_to_start_timeout=STICKY_START if sticky else None,
            start_to_close_timeout=VISIT_LIMIT,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=ONCE if sticky else REOPEN_RETRY,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        try:
            return await self.visiting
        finally:
            self.visiting = None

    def _absorb(self, visited: Visited) -> None:
        """Take in what a visit reports: settled requests, the worker, when next is due."""
        carry, now = self.carry, workflow.now()
        settled = set(visited.settled)
        for document in carry.requests:
            delivered = document.get("id") in settled and document.get("kind") == "message"
            if delivered and visited.lived is not None:
                carry.replies[str(document["id"])] = f"{visited.lived}\n{visited.reply or ''}"
        while len(carry.replies) > KEPT_REPLIES:
            del carry.replies[next(iter(carry.replies))]
        carry.requests = [d for d in carry.requests if d.get("id") not in settled]
        carry.last = visited
        carry.visits += 1
        carry.resident = visited.queue if visited.status not in ENDED_STATUSES else None
        if visited.lived is None:
            if carry.due_at is None and visited.pulse is not None:
                carry.due_at = render_timestamp(_next_pulse(visited, None, now))
            return
        carry.cycles += 1
        if visited.pulse is not None:
            carry.last_pulse_at = render_timestamp(now)
            carry.due_at = render_timestamp(_next_pulse(visited, now, now))
        else:
            carry.due_at = render_timestamp(now + timedelta(seconds=visited.wait_secs))

    async def _start_child(self, child: NewChild) -> None:
        """Start a funded child as a workflow of its own, which outlives this one."""
        spec = self.carry.spec
        options = dict(spec.options)
        options.update(
            agent_name=child.name,
            agent_ticker=child.ticker,
            specialty=child.specialty,
            starting_balance="0",  # its grant is all it has: a withdrawn grant is no money
        )
        child_spec = BeingSpec(child.key, options, spec.task_queue, parent=spec.key)
        try:
            await workflow.start_child_workflow(
                BeingWorkflow.run,
                # Its first visit goes to the worker that holds its parent, where its grant
                # is (a PostgreSQL store keeps a being's local files per machine).
                Carry(child_spec, resident=self.carry.resident),
                id=child.key,
                task_queue=workflow.info().task_queue,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            )
        except WorkflowAlreadyStartedError:
            pass  # started before this workflow continued as new
        if child.key not in self.carry.children:
            self.carry.children.append(child.key)


def _refused(error: ActivityError) -> bool:
    cause = error.cause
    return isinstance(cause, ApplicationError) and cause.non_retryable


def _next_pulse(visited: Visited, last: datetime | None, now: datetime) -> datetime:
    plan = visited.pulse
    assert plan is not None
    quiet = tuple(
        QuietHours(window.start, window.end, timedelta(seconds=window.offset_secs))
        for window in plan.quiet
    )
    return Schedule(timedelta(seconds=plan.frequency_secs), quiet).next_start(last, now)
