"""The visit as a Temporal activity: heartbeats while it works, a cancellation is a stop.

The visit runs as its own task, shielded: Temporal's cancellation (a `stop`, delivered at
a heartbeat) asks the being to stop at its next safe point, and the activity ends only
once the visit has ended there, so a cycle is never cut between a model call and its
debit. Errors keep their meaning for the workflow: a being held by another runtime, or
lost with its store, is retried (elsewhere, once the hold runs out); what no retry can
mend (a bad configuration, a state that refuses to open) fails at once.
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import activity
from temporalio.exceptions import ApplicationError

from singularity.errors import FatalIoError, SingularityError, StateLockedError
from singularity.fleet.messages import VISIT_ACTIVITY, Visit, Visited
from singularity.fleet.residents import Residents

HEARTBEAT_SECS = 2.0


class VisitActivity:
    """The visit of one worker, over the beings it holds."""

    def __init__(self, residents: Residents) -> None:
        self.residents = residents

    @activity.defn(name=VISIT_ACTIVITY)
    async def visit(self, visit: Visit) -> Visited:
        """Visit a being: open it if needed, apply requests, live if asked."""
        work = asyncio.ensure_future(self.residents.visit(visit))
        beat = asyncio.ensure_future(_heartbeat())
        try:
            return await _visited(asyncio.shield(work))
        except asyncio.CancelledError:
            if not work.done():
                # Cancelled by the workflow (a stop) or the worker's shutdown: the being stops
                # at its next safe point, and the activity ends once it has.
                self.residents.request_stop(visit.spec.key)
                with contextlib.suppress(ApplicationError):
                    await _visited(work)
            raise
        finally:
            beat.cancel()


async def _visited(work: asyncio.Future[Visited]) -> Visited:
    try:
        return await work
    except StateLockedError as error:
        raise ApplicationError(str(error), type="Busy") from None
    except FatalIoError as error:
        raise ApplicationError(str(error), type="Lost") from None
    except SingularityError as error:
        raise ApplicationError(str(error), type=type(error).__name__, non_retryable=True) from None


async def _heartbeat() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_SECS)
