"""Every call of the typed client (optimize.client.api) names an operation the server serves.

The server's app is built in this process only to read its OpenAPI document. The client's calls go to a transport
that records each request and answers `{}` in place of a server, so no server runs and nothing reaches the
network. The calls are found by introspection: a method added to the client later is checked without a change
here (a parameter name never seen before fails the test, asking for a value in VALUES).
"""

from __future__ import annotations

import inspect
import io
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from optimize.client.api import OptimizeApi
from optimize.client.http import OptimizeClient, segment
from optimize.core.refs import Reference

HTTP_METHODS = {"get", "put", "post", "patch", "delete"}
INTERNAL = "/v1/internal/"
BASE_URL = "http://recorded.invalid"
# Members of the typed client that open, wrap or close it rather than call the server.
NOT_CALLS = {"close", "connect", "over"}
# A user-given id holding what must be escaped: sent as it is, "/" would add a segment and "?" start a query.
ODD = "a/b?c d"

# Values by parameter name, then by annotation; a list holds variants, each called once (a reference with no
# selector takes the artifact's route, one with a version or an alias the version's). A callable is called for
# a fresh value each time (an iterator is spent by one request).
BY_NAME: dict[str, list[Any]] = {
    "reference": [Reference(ODD, ODD), Reference(ODD, ODD, version=3), Reference(ODD, ODD, alias="prod")],
    "deadline": [0.0],  # already past: a follow sends its request, then stops at the stream's first line
    "chunks": [lambda: iter([b"{}\n"])],
    "index": [0],
    "size": [3],
    "sink": [io.BytesIO],  # a file's bytes are streamed into it (a fresh one each call)
}
BY_ANNOTATION: dict[str, Any] = {
    "str": ODD,
    "str | None": ODD,
    "bool": True,
    "bool | None": True,
    "int": 2,
    "int | None": 2,
    "float | None": 0.5,
    "Json": {"key": "value"},
    "Json | None": {"key": "value"},
    "list[str] | None": ["weights"],
    "list[str]": ["a" * 64],
    "list[Json]": [{"role": "user", "content": "hello"}],
    "list[Json] | None": [{"path": "images/a.png", "sha256": "a" * 64, "bytes": 1}],
}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> list[tuple[str, re.Pattern[str], str]]:
    """(method, path pattern, path template) of each public operation in the server's OpenAPI document."""
    from optimize.api.app import create_app
    from optimize.core.settings import ServerSettings

    app = create_app(ServerSettings(data_dir=tmp_path_factory.mktemp("routes"), detect_gpus=False))
    try:
        paths = app.openapi()["paths"]
    finally:
        app.state.registry.store.dispose()
    return [(method.upper(), _pattern(path), path) for path, item in paths.items() if not path.startswith(INTERNAL)
            for method in item if method in HTTP_METHODS]


def _pattern(template: str) -> re.Pattern[str]:
    """`{param}` matches one escaped path segment; everything else itself."""
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile("".join("([^/]+)" if part.startswith("{") else re.escape(part) for part in parts))


def _matches(served: list[tuple[str, re.Pattern[str], str]], method: str, path: str, given: set[str]) -> bool:
    """Whether an operation has this method and path, its `{param}`s standing for values the call was given (so
    a misspelled fixed part, `endpoints/infos`, cannot pass for an id)."""
    for served_method, pattern, _template in served:
        match = pattern.fullmatch(path) if method == served_method else None
        if match and all(value in given for value in match.groups()):
            return True
    return False


def _segments(arguments: dict[str, Any]) -> set[str]:
    """The path segments a call's arguments can become, escaped as the client escapes them."""
    given: set[str] = set()
    for value in arguments.values():
        if isinstance(value, Reference):
            given |= {segment(value.namespace), segment(value.name), segment(value.selector)}
        elif isinstance(value, str | int) and not isinstance(value, bool):
            given.add(segment(str(value)))
    return given


class RecordingTransport(httpx.MockTransport):
    """Stands in for the server: records (method, escaped path) of each request and answers 200 `{}`."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        super().__init__(self._answer)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.raw_path.decode().partition("?")[0]))
        return httpx.Response(200, json={})


def client_calls(api: OptimizeApi) -> Iterator[tuple[str, Callable[..., Any]]]:
    """("runs.get", bound method) for every public call of the typed client and of each of its resources."""
    for name, member in inspect.getmembers(api):
        if name.startswith("_") or name in NOT_CALLS:
            continue
        if inspect.ismethod(member):
            yield name, member
        elif type(member).__module__ == "optimize.client.api":  # a resource (the transport lives in http.py)
            for verb, method in inspect.getmembers(member, inspect.ismethod):
                if not verb.startswith("_"):
                    yield f"{name}.{verb}", method


def argument_sets(call: Callable[..., Any]) -> list[dict[str, Any]]:
    """Keyword arguments for each variant of a call: every parameter given, optional ones too, so each branch
    that builds the path or query runs."""
    choices: dict[str, list[Any]] = {}
    for parameter in inspect.signature(call).parameters.values():
        # api.py's annotations are strings (postponed); a resolved one is compared by how it is spelled
        annotation = parameter.annotation
        spelled = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
        if parameter.name in BY_NAME:
            choices[parameter.name] = BY_NAME[parameter.name]
        elif spelled in BY_ANNOTATION:
            choices[parameter.name] = [BY_ANNOTATION[spelled]]
        else:
            pytest.fail(f"no value for parameter {parameter.name}: {parameter.annotation} of {call.__qualname__}; "
                        "add one to BY_NAME or BY_ANNOTATION")
    variants = max((len(values) for values in choices.values()), default=1)
    return [{name: _fresh(values[i % len(values)]) for name, values in choices.items()} for i in range(variants)]


def _fresh(value: Any) -> Any:
    return value() if callable(value) else value


def test_every_client_call_names_a_served_route_recorded_transport(served):
    transport = RecordingTransport()
    api = OptimizeApi(OptimizeClient(BASE_URL, transport=transport))
    named: list[str] = []
    wrong: list[str] = []
    for name, call in client_calls(api):
        named.append(name)
        for arguments in argument_sets(call):
            transport.requests.clear()
            answer = None
            try:
                answer = call(**arguments)
                if isinstance(answer, Iterator):  # an event stream sends its request when first read
                    next(answer, None)
            except TimeoutError:
                pass  # the deadline given has passed: the stream's request was sent all the same
            if isinstance(answer, str):  # a URL handed out rather than called: the proxy POSTs to it
                assert answer.startswith(BASE_URL + "/"), f"{name} hands out {answer}, not a URL of the server"
                with httpx.Client(transport=transport) as proxy:
                    proxy.post(answer)
            if not transport.requests:
                wrong.append(f"{name}({arguments}) sent no request")
            wrong.extend(f"{name}: {method} {path} is not an operation the server serves"
                         for method, path in transport.requests
                         if not _matches(served, method, path, _segments(arguments)))
    api.close()
    assert not wrong, "\n".join(wrong)
    # the introspection found the client's calls, not an empty list that checks nothing
    assert {"runs.get", "datasets.get", "uploads.send_shard", "endpoints.chat_url", "health"} <= set(named)


def test_a_misspelled_or_unescaped_path_matches_no_served_route(served):
    given = {"a%2Fb", "abc"}
    assert _matches(served, "GET", "/v1/training/runs/a%2Fb", given)
    assert not _matches(served, "GET", "/v1/training/run/abc", given)  # misspelled
    assert not _matches(served, "GET", "/v1/training/runs/a/b", given)  # an id's "/" sent unescaped
    assert not _matches(served, "DELETE", "/v1/training/runs/abc", given)  # the path exists; the method does not
    assert _matches(served, "GET", "/v1/training/endpoints/info", given)
    assert not _matches(served, "GET", "/v1/training/endpoints/infos", given)  # not an id the call was given
