"""`singularity doctor`: check configuration, gateway and skills without touching a being."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from singularity.cli.options import runtime_options, settings_from
from singularity.cli.output import print_json
from singularity.runtime.inspect.doctor import doctor


@click.command(name="doctor")
@runtime_options
def doctor_command(**params: Any) -> None:
    """Read-only pre-flight: configuration, gateway, model, Most and skills; every check runs."""
    report = asyncio.run(doctor(settings_from(params, on_postgres=True)))
    print_json(report.document, sort_keys=True)
    if report.failure is not None:
        raise report.failure
