"""`akka training endpoints create|get|list|wait|logs|send|proxy|detach|disable|enable|info|delete`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from optimize.cli.common import client_for, command
from optimize.cli.follow import Events, check_events, follow_status
from optimize.cli.logs import add_logs_command
from optimize.cli.output import CommandFailed, Output
from optimize.cli.render import DASH, age, footer, table

app = typer.Typer(help="Endpoints: serve a base model and its LoRA adapters over an OpenAI-compatible API.",
                  no_args_is_help=True)
Endpoint = Annotated[str, typer.Argument(help="Endpoint id or unambiguous prefix.")]
Timeout = Annotated[float | None, typer.Option("--timeout", help="Give up waiting after this many seconds.")]


@command(app, "create")
def create(
    out: Output,
    model: Annotated[str, typer.Option("--model", help="A base model, or a registered model NS/NAME[:vN].")],
    project: Annotated[str | None, typer.Option("--project", help="The project it counts for (a base model "
                                                "names none; a registered model its own).")] = None,
    device_profile: Annotated[str | None, typer.Option("--device-profile", help="Where it is served (default: "
                                                       "where the catalog serves the model).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the model answers; exit 1 if it never will.")
                    ] = False,
    timeout: Timeout = None,
    events: Events = False,
) -> None:
    """Serve a model. A candidate whose base model an active endpoint of the project serves attaches to it, on
    no new devices."""
    check_events(out, events, wait)
    with client_for(out) as api:
        answer = api.endpoints.create(model=model, project=project, device_profile=device_profile)
        verb = "attached to" if answer["attached"] else "created as"
        if not wait:
            out.emit(answer, lambda con, e: con.print(
                f"{model} {verb} endpoint {e['endpointId'][:12]} ({_phase(e)}); follow it with: "
                f"akka training endpoints wait {e['endpointId'][:12]}"))
            return
        out.note(f"{model} {verb} endpoint {answer['endpointId'][:12]}.")
        _follow(api, out, answer["endpointId"], timeout, events)


@command(app, "get")
def get(out: Output, endpoint: Endpoint) -> None:
    """Show an endpoint: its models, phase, devices and, on failure, the reason."""
    with client_for(out) as api:
        out.emit(api.endpoints.get(endpoint), _render)


@command(app, "list")
def list_endpoints(
    out: Output,
    project: Annotated[str | None, typer.Option("--project", help="Only this project's.")] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="active or a phase, e.g. READY.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Only endpoints serving this model (a prefix).")
                     ] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Include archived projects' endpoints.")] = False,
) -> None:
    """List endpoints, newest first (an archived project's only with --archived or --project)."""
    with client_for(out) as api:
        out.emit(api.endpoints.list(project=project, phase=phase, model=model, archived=archived), _render_list)


@command(app, "wait")
def wait(out: Output, endpoint: Endpoint, timeout: Timeout = None, events: Events = False) -> None:
    """Wait until every model of the endpoint answers; exit 1 if the endpoint fails or is deleted (-o json: the
    endpoint alone; --events: a JSON line per status first)."""
    check_events(out, events)
    with client_for(out) as api:
        _follow(api, out, endpoint, timeout, events)


add_logs_command(app, "endpoints", "endpoint", status="akka training endpoints get")


@command(app, "send")
def send(
    out: Output,
    endpoint: Endpoint,
    text: Annotated[str | None, typer.Option("--input", help="The user message.")] = None,
    file: Annotated[str | None, typer.Option("--file", help="Read the user message from this file.")] = None,
    instructions: Annotated[str | None, typer.Option("--instructions", help="The system message (default: the "
                                                     "endpoint answers with a trained model's own instructions).")
                            ] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", min=0.0, max=2.0,
                                                      help="Sampling temperature (0: greedy).")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", min=1, help="Answer length limit.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Which served model answers (default: the "
                                              "endpoint's own).")] = None,
) -> None:
    """Ask an endpoint one question through the server; no history is kept."""
    if (text is None) == (file is None):
        raise typer.BadParameter("give exactly one of --input and --file", param_hint="'--input'")
    if file is not None:
        from pathlib import Path

        text = Path(file).read_text()
    with client_for(out, timeout=600.0) as api:
        info = api.endpoints.get(endpoint)
        chosen = model or info["model"]
        # without --instructions the endpoint answers with the model's trained instructions, as on every route
        messages = ([{"role": "system", "content": instructions}] if instructions else []) + \
            [{"role": "user", "content": text}]
        answer = api.endpoints.chat(info["endpointId"], model=chosen, messages=messages, temperature=temperature,
                                    max_tokens=max_tokens)
    out.emit(answer, _render_answer)


@command(app, "proxy")
def proxy(out: Output, endpoint: Endpoint,
          port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Local port (0: any free one).")] = 8900
          ) -> None:
    """Expose one endpoint on 127.0.0.1:PORT: POST /v1/chat/completions (streaming included) is forwarded to it
    through the server; every other request is answered 404. Stop it with Ctrl-C."""
    from optimize.cli.endpoint_proxy import serve
    from optimize.client.credentials import find_token

    with client_for(out) as api:
        info = api.endpoints.get(endpoint)
        target = api.endpoints.chat_url(info["endpointId"])
    serve(target, port, token=find_token(out.server, out.token), started=lambda address: out.emit(
        {"endpointId": info["endpointId"], "url": f"http://{address}/v1"},
        lambda con, p: con.print(f"Endpoint {p['endpointId'][:12]} is proxied at {p['url']} (Ctrl-C stops it)")))


@command(app, "detach")
def detach(out: Output, endpoint: Endpoint,
           model: Annotated[str, typer.Argument(help="The attached model to stop serving (NS/NAME:vN).")]) -> None:
    """Stop serving an attached adapter; the endpoint goes on serving its other models."""
    with client_for(out) as api:
        answer = api.endpoints.detach(endpoint, model=model)
    out.emit(answer, _render)


@command(app, "disable")
def disable(out: Output, endpoint: Endpoint,
            model: Annotated[str, typer.Argument(help="The base model or an attached model (NS/NAME[:vN]).")]
            ) -> None:
    """Refuse a model's requests through the server (HTTP 409) until it is enabled; the endpoint keeps its device
    and the model stays loaded (callers of the endpoint's worker itself are unaffected)."""
    with client_for(out) as api:
        answer = api.endpoints.disable(endpoint, model=model)
    out.emit(answer, lambda con, e: con.print(
        f"Model {model} disabled at endpoint {e['endpointId'][:12]}: requests through the server answer 409; "
        f"enable it with: akka training endpoints enable {e['endpointId'][:12]} {model}", markup=False))


@command(app, "enable")
def enable(out: Output, endpoint: Endpoint,
           model: Annotated[str, typer.Argument(help="The base model or an attached model (NS/NAME[:vN]).")]
           ) -> None:
    """Answer a disabled model's requests through the server again."""
    with client_for(out) as api:
        answer = api.endpoints.enable(endpoint, model=model)
    out.emit(answer, lambda con, e: con.print(
        f"Model {model} enabled at endpoint {e['endpointId'][:12]}: it answers through the server again.",
        markup=False))


@command(app, "info")
def info(out: Output) -> None:
    """What endpoints here can do: idle timeout, adapters loaded at once, devices, engine, tool-call parsers."""
    with client_for(out) as api:
        out.emit(api.endpoints.info(), lambda con, i: con.print(
            f"Idle timeout      {i['idleTimeoutSeconds']:g} s (an endpoint holds its device until then)\n"
            f"Adapters at once  {i['adaptersAtOnce']}\nDevices each      {i['devicesPerEndpoint']}\n"
            f"Engine            {i['engine']}\nTool-call parsers {', '.join(i['toolCallParsers'])}\n"
            f"Device profiles   {', '.join(i['deviceProfiles'])}"))


@command(app, "delete")
def delete(out: Output, endpoint: Endpoint) -> None:
    """Take an endpoint down and free its device."""
    with client_for(out) as api:
        answer = api.endpoints.delete(endpoint)
    out.emit(answer, lambda con, e: con.print(f"Endpoint {e['endpointId'][:12]} {_phase(e)}."))


def _follow(api, out: Output, endpoint_id: str, timeout: float | None, events: bool) -> None:
    final = follow_status(api, out, "endpoints", endpoint_id, timeout, _line, _render, "does not answer yet",
                          events=events)
    if final["terminal"]:  # an endpoint that will not answer is a failure, whatever else was asked
        raise CommandFailed(1)


def _phase(e: dict[str, Any]) -> str:
    return e["phase"].replace("_", " ").title()  # AWAITING_CAPACITY -> Awaiting Capacity


def _line(e: dict[str, Any]) -> str:
    ready = sum(1 for m in e["models"] if m["ready"])
    parts = [f"{e['endpointId'][:12]} {_phase(e)}", f"answering {ready}/{len(e['models'])} model(s)"]
    if e.get("waitingFor"):
        parts.append(f"— {e['waitingFor']}")
    if e.get("failureReason"):
        parts.append(f"— {e['failureReason'].splitlines()[0]}")
    return "  ".join(parts)


def _render(con, e: dict[str, Any]) -> None:
    con.print(f"[bold]Endpoint[/]    {e['endpointId']}")
    con.print(f"Project     {e['project']}")
    con.print(f"Base model  {e['baseModel']['id']} at {e['baseModel']['commit'][:12]}")
    con.print(f"Phase       {_phase(e)} on {', '.join(e['devicesHeld']) or DASH} "
              f"(profile {e['deviceProfile']})")
    if e.get("waitingFor"):
        con.print(f"Waiting     {e['waitingFor']}")
    if e.get("failureReason"):
        con.print(f"[red]Failure[/]     {e['failureReason'].splitlines()[0]}")
    for m in e["models"]:
        state = "answering" if m["ready"] else "not answering yet"
        follows = f" (follows {m['follows']})" if m.get("follows") else ""
        replaced = f" (its alias moved to {m['replacedBy']})" if m.get("replacedBy") else ""
        con.print(f"  {m['kind']:<8} {m['name']:<40} {state}" + ("" if m.get("enabled", True) else " (disabled)")
                  + follows + replaced)
    con.print("Ask it      akka training endpoints send " + e["endpointId"][:12] + " --input TEXT, or POST "
              "<server>/v1/chat/completions with model set to one of the names above")
    if e.get("load"):
        con.print(f"Load        {_load_line(e['load'])}", markup=False)
    con.print(f"Created     {age(e['createdAt'])}")


def _load_line(load: dict[str, Any]) -> str:
    """What the worker last reported: requests served, in flight and queued; tokens/s and latency over a minute."""
    def seconds(value):
        return DASH if value is None else f"{value:.2f}s"

    return (f"{load.get('served', 0)} served, {load.get('inFlight', 0)} in flight, {load.get('queued', 0)} queued; "
            f"last minute {load.get('tokensPerSecond', 0):g} tokens/s, latency p50 "
            f"{seconds(load.get('latencyP50Seconds'))} p95 {seconds(load.get('latencyP95Seconds'))}; "
            f"{load.get('tokens', 0):,} tokens generated")


def _render_list(con, data) -> None:
    grid = table("ENDPOINT", "PROJECT", "BASE MODEL", "ADAPTERS", "PHASE", "DEVICES", "CREATED")
    for e in data["endpoints"]:
        adapters = [m["name"] for m in e["models"] if m["kind"] == "adapter"]
        grid.add_row(e["endpointId"][:12], e["project"] + (" (archived)" if e.get("projectArchived") else ""),
                     e["baseModel"]["id"], ", ".join(adapters) or DASH, _phase(e),
                     ", ".join(e["devicesHeld"]) or DASH, age(e["createdAt"]))
    con.print(grid)
    con.print(footer(len(data["endpoints"]), "endpoint"))


def _render_answer(con, answer: dict[str, Any]) -> None:
    message = answer["choices"][0]["message"]
    if message.get("content"):
        con.print(message["content"], markup=False, highlight=False)
    for call in message.get("tool_calls") or []:
        con.print(f"tool call: {call['function']['name']}({call['function']['arguments']})", markup=False,
                  highlight=False)
    usage = answer.get("usage") or {}
    con.print(f"[dim]{answer['model']} — {usage.get('completion_tokens', 0)} token(s), "
              f"finish: {answer['choices'][0]['finish_reason']}[/]")
