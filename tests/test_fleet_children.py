"""A being of the fleet funds a child: the money moves by a ledger transfer, the child lives
as a child workflow of its own, and it outlives its parent (parent-close policy abandon):
stopped, the parent's workflow ends while the child's lives on and answers its operator.
The Temporal dev server, a worker in this process, the scripted gateway with prices; the
family in a directory store, or in PostgreSQL, where the child is a being of the same
store under its own agent id (its key)."""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import ParentClosePolicy
from temporalio.client import Client, WorkflowExecutionStatus

from singularity.fleet import control
from singularity.fleet.connection import TemporalConnection, connect
from singularity.fleet.dev import TemporalDevServer
from singularity.fleet.messages import DEFAULT_QUEUE, KEY_SEPARATOR
from singularity.fleet.places import FleetStore
from singularity.runtime.family.children import CHILDREN_DIR
from singularity.testing.scripted_server import Turn
from tests.support.children_gateway import FamilyGateway, spawn_turn
from tests.support.fleet import (
    STORES,
    being_events,
    check_life,
    dev_server,
    fleet_store,
    in_process_worker,
    verify_being,
)
from tests.support.polling import wait_for_awaited

__all__ = ["dev_server"]
PRICES = {"input_price": "1", "output_price": "2"}
PARENT, CHILD = "Ada", "Kid"
GRANT = "1.5"


def _plan(name: str, number: int) -> Any:
    """The parent funds a child in its first cycle; then every being just talks."""
    if name == PARENT and number == 0:
        return spawn_turn(CHILD, "KID", "testing", budget=GRANT)
    return None


async def _status(client: Client, key: str) -> dict[str, Any]:
    return await control.status(client, key)


async def _family(
    store: FleetStore, parent: str, target: str, gateway: FamilyGateway
) -> dict[str, Any]:
    client = await connect(TemporalConnection(target))
    params = {"brama_url": gateway.url, **PRICES}
    async with in_process_worker(client, store, params):
        options = {"starting_balance": "5", "agent_name": PARENT, "cycle_interval_secs": "3600"}
        await control.start(client, parent, options, DEFAULT_QUEUE)

        async def child_lived() -> bool:
            children = (await _status(client, parent))["children"]
            return bool(children) and (await _status(client, children[0]))["cycles"] >= 1

        await wait_for_awaited(child_lived, "the child's first cycle")
        [child_key] = (await _status(client, parent))["children"]
        parent_before = await _status(client, parent)
        child_info = (await client.get_workflow_handle(child_key).describe()).raw_description
        await control.request(client, parent, "stop")
        parent_ended = await client.get_workflow_handle(parent).result()
        child_running = (await client.get_workflow_handle(child_key).describe()).status
        # The orphan lives on: its operator's message is read by its next cycle.
        sent = await control.request(client, child_key, "message", text="are you alone?")
        answered = await control.reply(client, child_key, str(sent["request_id"]))
        await control.request(client, child_key, "stop")
        child_ended = await client.get_workflow_handle(child_key).result()
        history = await client.get_workflow_handle(parent).fetch_history()
    policies = [
        event.start_child_workflow_execution_initiated_event_attributes.parent_close_policy
        for event in history.events
        if event.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    return {
        "policies": policies,
        "child_key": child_key,
        "parent_before": parent_before,
        "parent_ended": parent_ended,
        "child_info": child_info.workflow_execution_info,
        "child_running": child_running,
        "answered": answered,
        "child_ended": child_ended,
    }


@pytest.mark.parametrize("backend", STORES)
def test_a_funded_child_is_a_workflow_that_outlives_its_parent(
    tmp_path: Path, dev_server: TemporalDevServer, backend: str
) -> None:
    store = fleet_store(backend, tmp_path)
    parent = f"ada-{uuid.uuid4().hex[:6]}"  # the PostgreSQL server outlives the test
    with FamilyGateway(_plan, default=Turn.text("fine")) as gateway:
        found = asyncio.run(_family(store, parent, dev_server.target, gateway))
    child_key = found["child_key"]
    parent_key, _, child_id = child_key.partition(KEY_SEPARATOR)
    assert parent_key == parent
    # A child workflow of the parent's, left running when the parent closed.
    info = found["child_info"]
    assert info.parent_execution.workflow_id == parent
    assert found["policies"] == [ParentClosePolicy.PARENT_CLOSE_POLICY_ABANDON]
    assert found["parent_ended"]["status"] == "stopped"
    assert found["child_running"] is WorkflowExecutionStatus.RUNNING
    assert (found["answered"]["status"], found["answered"]["reply"]) == ("completed", "fine")
    assert found["child_ended"]["status"] == "stopped"
    # Its local files are under its parent's, in either store.
    assert Path(store.state_dir(child_key)) == tmp_path / parent / "state" / CHILDREN_DIR / child_id
    # The money moved once, by the parent's ledger, and is all the child had.
    parent_events, child_events = being_events(store, parent), being_events(store, child_key)
    [funded] = [e for e in parent_events if e["type"] == "child_funded"]
    assert (funded["child_id"], funded["amount"]) == (child_id, GRANT)
    assert not any(e["type"] == "child_refunded" for e in parent_events)
    child = found["child_ended"]
    spent = Decimal(child["spent_usd"])
    assert spent > 0
    assert Decimal(child["balance_usd"]) + spent == Decimal(GRANT)
    ended = found["parent_ended"]
    assert Decimal(ended["balance_usd"]) + Decimal(ended["spent_usd"]) + Decimal(GRANT) == 5
    assert found["parent_before"]["children"] == [child_key]
    for events, key in ((parent_events, parent), (child_events, child_key)):
        assert check_life(events) == []
        assert events[-1]["type"] == "stopped"
        checked = verify_being(store, key)
        assert checked.returncode == 0, checked.stdout + checked.stderr
