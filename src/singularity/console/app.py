"""The operator console: a Starlette application over a `BeingSource`.

Pages are Jinja2 templates; htmx swaps fragments, and one server-sent event stream per
page pushes the fragments that changed (the fleet table; a being's summary, conversation,
activity, inbox and proposals). Every action is an operator request handed to the being
(`BeingSource.deliver`), the same path `singularity say` takes; the console writes
nothing of a being itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from singularity.console import views
from singularity.console.security import (
    AUTH_COOKIE,
    CSRF_HEADER,
    SESSION_COOKIE,
    Guard,
    new_session,
)
from singularity.console.source import BeingSource, OutOfReach, UnknownBeing
from singularity.domain.operator import RequestKind, new_request, sha256_text
from singularity.errors import SingularityError, StateError
from singularity.sanctum.names import SanctumRefusal
from singularity.timestamps import now_text

HERE = Path(__file__).parent
POLL_SECS = 1.0
HEARTBEAT_SECS = 15.0
CONTROLS: dict[str, RequestKind] = {"pause": "pause", "resume": "resume", "stop": "stop"}


def create_app(source: BeingSource, guard: Guard, *, poll_secs: float = POLL_SECS) -> Any:
    """The console's ASGI application, behind its guard."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals["markdown"] = views.render_markdown

    def page(request: Request, name: str, context: dict[str, Any]) -> Response:
        session = request.cookies.get(SESSION_COOKIE)
        fresh = session is None
        session = session or new_session()
        context = {
            **context,
            "csrf_header": CSRF_HEADER,
            "csrf": guard.csrf_token(session),
            "guarded": guard.token is not None,
        }
        response = templates.TemplateResponse(request, name, context)
        if fresh:
            response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict")
        return response

    def fragment(request: Request, name: str, context: dict[str, Any]) -> str:
        return templates.get_template(name).render({"request": request, **context})

    async def fleet(request: Request) -> Response:
        context = {"rows": views.fleet_rows(source), "label": source.label}
        return page(request, "fleet.html", context)

    async def fleet_events(request: Request) -> Response:
        def render() -> dict[str, str]:
            rows = views.fleet_rows(source)
            return {"fleet": fragment(request, "_fleet_rows.html", {"rows": rows})}

        return _stream(request, render, poll_secs)

    def live_context(key: str) -> dict[str, Any]:
        """What the live parts of a being's page show (pushed every second)."""
        state = source.state(key)
        follower = source.follower(key)
        live = source.alive(key)
        return {
            "key": key,
            "state": state,
            "status": views.status_of(state, live, follower.paused),
            "live": live,
            "paused": follower.paused,
            "spent": views.spent_of(state),
            "tail": views.conversation_tail(source, key, follower),
            "recent": views.recent_events(follower),
            "waiting": source.waiting(key),
            "proposals": list(follower.proposals.values()),
            "out_of_reach": source.out_of_reach(key),
        }

    def being_context(key: str) -> dict[str, Any]:
        context = live_context(key)
        state = context["state"]
        follower = source.follower(key)
        series = views.balance_series(state.budget.starting, follower.ledger)
        context.update(
            identity=state.identity.model_dump(),
            chart=views.chart(series),
            journal=follower.journal,
            memories=views.memories(state, ""),
            files=source.sanctum_files(key),
            family=source.family(key),
        )
        return context

    async def being(request: Request) -> Response:
        key = request.path_params["key"]
        return page(request, "being.html", being_context(key))

    async def being_events(request: Request) -> Response:
        key = request.path_params["key"]
        parts = {
            "summary": "_summary.html",
            "conversation": "_conversation.html",
            "activity": "_activity.html",
            "waiting": "_waiting.html",
            "proposals": "_proposals.html",
        }

        def render() -> dict[str, str]:
            context = live_context(key)
            return {name: fragment(request, template, context) for name, template in parts.items()}

        return _stream(request, render, poll_secs)

    async def memory_search(request: Request) -> Response:
        key = request.path_params["key"]
        found = views.memories(source.state(key), request.query_params.get("q", ""))
        return HTMLResponse(fragment(request, "_memories.html", {"memories": found}))

    def out_of_reach(request: Request, reason: str) -> Response:
        """A request this console cannot hand to the being: 409, with why."""
        notice = fragment(request, "_notice.html", {"error": reason})
        return HTMLResponse(notice, status_code=409)

    async def act(request: Request, kind: RequestKind, **fields: Any) -> Response:
        key = request.path_params["key"]
        reason = source.out_of_reach(key)
        if reason is not None:
            return out_of_reach(request, reason)
        try:
            operator_request = new_request(kind, now_text(), **fields)
            delivery = source.deliver(key, operator_request)
        except UnknownBeing:
            raise
        except OutOfReach as error:
            return out_of_reach(request, str(error))
        except SingularityError as error:
            return HTMLResponse(fragment(request, "_notice.html", {"error": str(error)}))
        notice = {"request": operator_request, "delivery": delivery, "kind": kind}
        return HTMLResponse(fragment(request, "_notice.html", notice))

    async def say(request: Request) -> Response:
        form = await request.form()
        return await act(request, "message", text=str(form.get("text", "")))

    async def control(request: Request) -> Response:
        form = await request.form()
        kind = CONTROLS.get(str(form.get("action", "")))
        if kind is None:
            return HTMLResponse(fragment(request, "_notice.html", {"error": "unknown action"}))
        return await act(request, kind)

    async def topup(request: Request) -> Response:
        form = await request.form()
        return await act(
            request,
            "credit",
            amount=str(form.get("amount", "")).strip(),
            note=str(form.get("note", "")),
        )

    async def review(request: Request) -> Response:
        form = await request.form()
        return await act(
            request,
            "review",
            proposal_id=str(form.get("proposal_id", "")),
            decision=str(form.get("decision", "")),
        )

    async def sanctum(request: Request) -> Response:
        key = request.path_params["key"]
        path = request.query_params.get("path", "")
        context = being_context(key)
        text = _sanctum_text(source, key, path)
        follower = source.follower(key)
        context.update(
            path=path,
            text=text,
            base=None if text is None else sha256_text(text),
            changes=list(reversed(follower.sanctum.get(path, []))),
        )
        return page(request, "sanctum.html", context)

    async def sanctum_diff(request: Request) -> Response:
        key = request.path_params["key"]
        form = await request.form()
        path, text = str(form.get("path", "")), str(form.get("text", "")).replace("\r\n", "\n")
        before = _sanctum_text(source, key, path) or ""
        context = {
            "key": key,
            "path": path,
            "text": text,
            "base": str(form.get("base", "")),
            "lines": views.diff_lines(before, text, path),
        }
        return HTMLResponse(fragment(request, "_diff.html", context))

    async def sanctum_save(request: Request) -> Response:
        form = await request.form()
        base = str(form.get("base", "")) or None
        return await act(
            request,
            "sanctum_write",
            path=str(form.get("path", "")),
            text=str(form.get("text", "")).replace("\r\n", "\n"),
            base_sha256=base,
        )

    async def login_form(request: Request) -> Response:
        return page(request, "login.html", {"failed": False})

    async def login(request: Request) -> Response:
        form = await request.form()
        if not guard.token_matches(str(form.get("token", ""))):
            response = page(request, "login.html", {"failed": True})
            response.status_code = 401
            return response
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(AUTH_COOKIE, guard.auth_value(), httponly=True, samesite="strict")
        return response

    async def unknown(request: Request, error: Exception) -> Response:
        return HTMLResponse(f"<p>{type(error).__name__}: no such being</p>", status_code=404)

    async def unreadable(request: Request, error: Exception) -> Response:
        """The source cannot be read now (a state store that went away): 503, with why."""
        return HTMLResponse(fragment(request, "_notice.html", {"error": str(error)}), 503)

    routes = [
        Route("/", fleet),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/events/fleet", fleet_events),
        Route("/b/{key}", being),
        Route("/b/{key}/events", being_events),
        Route("/b/{key}/memories", memory_search),
        Route("/b/{key}/say", say, methods=["POST"]),
        Route("/b/{key}/control", control, methods=["POST"]),
        Route("/b/{key}/topup", topup, methods=["POST"]),
        Route("/b/{key}/review", review, methods=["POST"]),
        Route("/b/{key}/sanctum", sanctum),
        Route("/b/{key}/sanctum/diff", sanctum_diff, methods=["POST"]),
        Route("/b/{key}/sanctum/save", sanctum_save, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes, exception_handlers={UnknownBeing: unknown, StateError: unreadable}
    )
    return guard.middleware(app)


def _sanctum_text(source: BeingSource, key: str, path: str) -> str | None:
    """A sanctum file's text; None when it is missing or its path is refused."""
    try:
        return source.sanctum_text(key, path)
    except UnknownBeing:
        raise
    except (SanctumRefusal, SingularityError):
        return None


def _event(name: str, html: str) -> str:
    data = "".join(f"data: {line}\n" for line in html.splitlines() or [""])
    return f"event: {name}\n{data}\n"


def _stream(request: Request, render: Callable[[], dict[str, str]], poll: float) -> Response:
    async def events() -> AsyncIterator[str]:
        shown: dict[str, str] = {}
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while not await request.is_disconnected():
            try:
                parts = render()
            except UnknownBeing:
                return
            except StateError:
                parts = {}  # a source that cannot be read now: the next look may succeed
            for name, html in parts.items():
                if shown.get(name) != html:
                    shown[name] = html
                    quiet_since = loop.time()
                    yield _event(name, html)
            if loop.time() - quiet_since > HEARTBEAT_SECS:
                quiet_since = loop.time()
                yield ": still here\n\n"
            await asyncio.sleep(poll)

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
