"""The fleet: beings on many machines, as Temporal workflows, their state in a shared store.

One workflow per being (its id is the being's key) holds the life loop: the solvency gate,
the cycle, the sleep between cycles. Each cycle is one activity, a *visit*: a worker opens
the being from the state store (under its single-writer hold), applies what the operator
asked, lives the cycle and commits every step, heartbeating while it works. Workers keep
the beings they visited open between cycles and are visited again first; a worker that
dies or freezes loses its beings to the others, which reopen them from the store.

Only this package imports `temporalio` (the `[fleet]` extra); `singularity run` needs none
of it. `docs/fleet.md` tells the design, the commands and how to deploy it.

    messages     what workflows and activities pass each other (no conversation, no secret)
    places       where a being lives and with which settings a worker opens it
    residents    the beings a worker holds open, and the one visit function
    workflow     the being's workflow: life loop, operator updates, status query, children
    activities   the visit as a Temporal activity (heartbeats, cancellation as a stop)
    connection   how workers and commands reach Temporal (plain, TLS, mTLS, an API key)
    worker       a worker process: the workflow and the visit on a task queue
    control      the client side of `singularity fleet`
    dev          a local Temporal dev server and PostgreSQL for a one-machine trial
"""
