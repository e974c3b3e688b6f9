"""What a session holds and what it is given: ``state``, ``assemble``, and ``schema``
(the shapes of an assembly and of an input event)."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from ctxledger._open import open_existing
from ctxledger.cli._console import stdout
from ctxledger.cli._errors import fail
from ctxledger.cli._options import (
    FormatOption,
    JsonOrText,
    Session,
    check_profile,
    db_of,
    parse_optional_time,
    parse_time,
    session_profile,
)


def state(
    ctx: typer.Context,
    session: Session,
    now: Annotated[str | None, typer.Option(
        "--now", metavar="ISO",
        help="The time the state is taken at, e.g. 2025-05-11T10:00:00Z (default: now)."
             " It anchors time windows such as the 7-day tool usage.")] = None,
    agent: Annotated[str | None, typer.Option(
        "--agent", metavar="A",
        help="Scope the state to agent type A's manifest (defaults plus the setting"
             " agent_manifests); an agent without one gets the full state plus _agent and a"
             " _warning.")] = None,
    format: FormatOption = JsonOrText.json,
) -> None:
    """Print the session's projection state (counts, chapter, settings, tools, documents
    in compact form)."""
    from ctxledger import render

    if agent is not None and not agent.strip():
        raise typer.BadParameter("must not be empty", param_hint="'--agent'")
    options: dict[str, Any] = {"load_vocabulary": False}  # state counts no tokens
    if now is not None:
        when = parse_time(now, "--now")
        options["clock"] = lambda: when
    with open_existing(db_of(ctx), **options) as ledger:
        found = ledger.state(session, agent=agent)
    if format is JsonOrText.json:
        typer.echo(render.dumps(found, indent=2))
    else:
        stdout().print(render.state_table(found, title=f"state {session}"))


class AssembleFormat(StrEnum):
    """What ``assemble`` prints: the Assembly, its breakdown, or its messages in a chat
    API's shape."""

    json = "json"
    text = "text"
    openai = "openai"
    anthropic = "anthropic"


def assemble(
    ctx: typer.Context,
    session: Session,
    profile: Annotated[str | None, typer.Option(
        "--profile", metavar="NAME",
        help="Assembler profile (card, session, brief...). Default: the session's"
             " 'profile' setting; one of the two is required.")] = None,
    now: Annotated[str | None, typer.Option(
        "--now", metavar="ISO",
        help="The assembly time, e.g. 2025-05-11T10:00:00Z (default: now).")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", metavar="FILE", dir_okay=False,
        help="A whole policy as JSON, instead of the one the session's settings give.")] = None,
    agent: Annotated[str | None, typer.Option(
        "--agent", metavar="A",
        help="Add the session state scoped by agent type A's manifest: JSON gains 'agent'"
             " {name, state, text}; text ends with the state block (not with openai or"
             " anthropic).")] = None,
    format: Annotated[AssembleFormat, typer.Option(
        "--format",
        help="json (default): the whole Assembly; text: the breakdown; openai: the"
             " messages list for chat.completions.create; anthropic: the {system,"
             " messages} object for messages.create.")] = AssembleFormat.json,
    text: Annotated[bool, typer.Option(
        "--text/--no-text",
        help="With --format text: show the context text after the breakdown.")] = True,
    record: Annotated[bool, typer.Option(
        "--record",
        help="Also append the assembly as context.assembled (with its policy), so audit"
             " derives it again and report-usage can name it; the position written goes"
             " to stderr.")] = False,
) -> None:
    """Build a session's context with a profile; JSON prints the whole Assembly.

    The profile is --profile, else the session's 'profile' setting; --format text says
    which, then shows the breakdown and (unless --no-text) the context text. --format
    openai and anthropic print the context's messages as that API takes them. With
    --record the context sent is recorded for audit (as HTTP's record=true does)."""
    from ctxledger import render
    from ctxledger.io._input import read_policy
    from ctxledger.render._assembly import assembly_view

    check_profile(profile)
    if agent is not None and not agent.strip():
        raise typer.BadParameter("must not be empty", param_hint="'--agent'")
    if agent is not None and format in (AssembleFormat.openai, AssembleFormat.anthropic):
        raise typer.BadParameter(
            f"--format {format.value} carries the assembly's messages only; an agent's"
            " scoped state comes with --format json or text", param_hint="'--agent'")
    when = parse_optional_time(now, "--now")
    policy_text = read_policy(policy)
    with open_existing(db_of(ctx)) as ledger:
        if not ledger.view(session).exists:
            raise fail(f"unknown session {session!r}")
        profile, source = session_profile(ledger, session, profile)
        found = ledger.context(session, profile, agent=agent, now=when, policy=policy_text)
        if record:
            written = ledger.record_assembly(session, found.assembly, policy_text)
            typer.echo(f"recorded context.assembled at position {written.positions[-1]}",
                       err=True)
    result = found.assembly
    if format is AssembleFormat.json:
        typer.echo(result.model_dump_json(indent=2) if agent is None
                   else render.dumps(found.to_json(), indent=2))
    elif format is AssembleFormat.openai:
        typer.echo(chat_json(found.to_openai()))
    elif format is AssembleFormat.anthropic:
        typer.echo(chat_json(found.to_anthropic()))
    else:
        console = stdout()
        console.print(f"profile {profile} (from {source})", markup=False)
        console.print(assembly_view(result, show_text=text, text=found.text()))


def chat_json(request: object) -> str:
    """A chat request as indented JSON, its keys in the converter's order (``role``
    first), not sorted: it is the shape the API documents."""
    return json.dumps(request, ensure_ascii=False, indent=2)


class SchemaKind(StrEnum):
    """What ``ctxledger schema`` exports."""

    assembly = "assembly"
    events = "events"


def schema(
    kind: Annotated[SchemaKind, typer.Argument(
        help="assembly (default): the output of 'assemble', its report one of the"
             " registered profiles' reports; events: the input of 'append'.",
        metavar="[assembly|events]")] = SchemaKind.assembly,
) -> None:
    """Print a JSON Schema: of an Assembly, or of the events the log accepts."""
    from ctxledger import render

    if kind is SchemaKind.assembly:
        from ctxledger.assembler.schema import assembly_schema

        found = assembly_schema()
    else:
        from ctxledger.store.json_schema import events_schema

        found = events_schema()
    typer.echo(render.dumps(found, indent=2))


COMMANDS: dict[str, Callable[..., None]] = {"state": state, "assemble": assemble, "schema": schema}
"""This group's commands by name, in ``--help`` order."""
