"""The client side of `singularity fleet`: start beings, send them requests, read status.

Every control is an operator request of `singularity.domain.operator` (made and checked
here, as `say` and the console make theirs), sent as the workflow's `operator` update: the
workflow refuses a malformed one, keeps an accepted one until a visit settles it, and
answers with its id. Status is the workflow's `status` query.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from singularity.domain.operator import RequestKind, new_request
from singularity.errors import StateError, StateLockedError
from singularity.fleet.messages import WORKFLOW_NAME, BeingSpec, Carry, Status
from singularity.fleet.places import check_key, check_options
from singularity.fleet.workflow import BeingWorkflow
from singularity.timestamps import now_text

LIST_QUERY = f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus = 'Running'"


async def start(
    client: Client, key: str, options: Mapping[str, str], task_queue: str
) -> dict[str, Any]:
    """Start a being's workflow (refused while one with that key lives)."""
    spec = BeingSpec(check_key(key), check_options(options), task_queue)
    try:
        handle = await client.start_workflow(
            BeingWorkflow.run, Carry(spec), id=key, task_queue=task_queue
        )
    except WorkflowAlreadyStartedError:
        raise StateLockedError(f"being {key} already lives in the fleet") from None
    return {"key": key, "run_id": handle.result_run_id, "task_queue": task_queue}


async def request(client: Client, key: str, kind: RequestKind, **fields: Any) -> dict[str, Any]:
    """Send one operator request to a living being; its id, once the workflow accepted it."""
    made = new_request(kind, now_text(), **fields)
    handle = _handle(client, key)
    try:
        answer: dict[str, Any] = await handle.execute_update(BeingWorkflow.operator, made.to_json())
    except WorkflowUpdateFailedError as error:
        raise StateError(f"being {key} refused the request: {error.cause}") from None
    except RPCError as error:
        raise _not_living(key, error) from None
    return answer


async def topup(client: Client, key: str, amount: Decimal, note: str | None) -> dict[str, Any]:
    """An operator credit (never revenue)."""
    return await request(client, key, "credit", amount=amount, note=note)


async def reply(client: Client, key: str, request_id: str) -> dict[str, str]:
    """Wait for the cycle that read a message; its status and closing text. A wait the
    workflow cut by continuing as new is asked again of its next run, which carries the
    message and the replies."""
    while True:
        handle = _handle(client, key)
        try:
            # The SDK types an update declared with options as returning its coroutine.
            answer: dict[str, str] = await handle.execute_update(
                BeingWorkflow.reply,  # type: ignore[arg-type]
                request_id,
            )
        except WorkflowUpdateFailedError as error:
            raise StateError(f"being {key} refused the wait: {error.cause}") from None
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND and await _running(handle):
                continue  # the run continued as new while the reply was awaited
            raise _not_living(key, error) from None
        return answer


async def status(client: Client, key: str) -> dict[str, Any]:
    """The being's status, as its workflow knows it."""
    try:
        found: Status = await _handle(client, key).query(BeingWorkflow.status)
    except RPCError as error:
        raise _not_living(key, error) from None
    return dataclasses.asdict(found)


async def living(client: Client) -> list[dict[str, Any]]:
    """Every living being of the fleet with its status."""
    found = []
    async for execution in client.list_workflows(LIST_QUERY):
        if execution.status is not WorkflowExecutionStatus.RUNNING:
            continue
        try:
            found.append(await status(client, execution.id))
        except StateError:
            continue  # it ended while we listed
    return sorted(found, key=lambda entry: str(entry["key"]))


async def _running(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the latest run of the handle's workflow is running."""
    try:
        described = await handle.describe()
    except RPCError:
        return False
    return described.status is WorkflowExecutionStatus.RUNNING


def _handle(client: Client, key: str) -> WorkflowHandle[Any, Any]:
    return client.get_workflow_handle(key)


def _not_living(key: str, error: RPCError) -> StateError:
    if error.status is RPCStatusCode.NOT_FOUND:
        return StateError(f"no living being {key} in the fleet")
    return StateError(f"being {key}: {error.message}")
