"""A phone server's ``--public-url``: an address that cannot be right is refused with the
reason (never showing its credentials), and at start-up the server asks its own
``GET /health`` through the address, warning once with the fix when the answer is not its
own (real local servers: this one, another voxflow server, a foreign one, nothing)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from voxflow_adapters.hosting.public_url import (
    PublicUrlError,
    check_public_url,
    probe_public_url,
)
from voxflow_adapters.phone.front_door import PhoneFrontDoor
from voxflow_adapters.phone.server import PhoneServer, PhoneSettings


@pytest.mark.parametrize(("url", "base"), [
    ("https://voice.example.com", "https://voice.example.com"),
    ("https://voice.example.com/", "https://voice.example.com"),
    ("http://127.0.0.1:8081", "http://127.0.0.1:8081"),
    ("https://[2001:db8::1]:8443/", "https://[2001:db8::1]:8443"),
    ("HTTPS://Voice.Example.com:/", "https://Voice.Example.com"),  # (the name as written)
    ("https://[2001:DB8:0:0::1]", "https://[2001:db8::1]"),
    ("https://localhost:65535", "https://localhost:65535"),
    ("https://xn--bcher-kva.example", "https://xn--bcher-kva.example"),
])
def test_a_well_formed_public_url_is_its_base(url: str, base: str) -> None:
    assert check_public_url(url) == base


@pytest.mark.parametrize(("url", "problem"), [
    ("voice.example.com", "give https://host[:port]"),
    ("wss://voice.example.com", "give https://host[:port]"),
    ("https://", "names no host"),
    ("https://voice.example.com:99999", "not a URL"),
    ("https://ops:hunter2@voice.example.com", "carries credentials"),
    ("https://hunter2@voice.example.com", "carries credentials"),
    ("https://voice.example.com/?x=1", "has a query or fragment"),
    ("https://voice.example.com?", "has a query or fragment"),
    ("https://voice.example.com/#top", "has a query or fragment"),
    ("https://voice.example.com/phone", "has a path (/phone)"),
    ("https://voice.example.com:0", "has port 0"),
    ("https://exa mple.com", "holds a space or control character"),
    ("https://exa\nmple.com", "holds a space or control character"),
    (" https://voice.example.com", "holds a space or control character"),
    ("https://exa;mple.com", "names an invalid host ('exa;mple.com')"),
    ("https://voice_1.example.com", "names an invalid host"),
    ("https://-voice.example.com", "names an invalid host"),
    ("https://voice-.example.com", "names an invalid host"),
    ("https://voice..example.com", "names an invalid host"),
    ("https://voice.example.com.", "names an invalid host"),
    (f"https://{'a' * 64}.example.com", "names an invalid host"),
    ("https://b\u00fccher.example", "names an invalid host"),
    ("https://999.0.0.1", "names an invalid host"),
    ("https://10.1", "names an invalid host"),
    ("https://[v1.x]", "names an invalid host"),
    ("https://[fe80::1%25eth0]", "names an invalid host"),
])
def test_a_public_url_that_cannot_be_right_is_refused_with_the_reason(
    url: str, problem: str,
) -> None:
    with pytest.raises(PublicUrlError) as refused:
        check_public_url(url)
    assert problem in str(refused.value) and str(refused.value).startswith("--public-url ")
    assert "hunter2" not in str(refused.value)
    with pytest.raises(ValueError, match="public_url"):  # (a PublicUrlError: a ValueError)
        PhoneSettings(public_url=url)


@given(st.text() | st.builds(lambda host, rest: f"https://{host}{rest}", st.text(),
                             st.sampled_from(["", "/", ":0", ":8443", ":99999", ":x"])))
@settings(max_examples=500, derandomize=True, deadline=None)
def test_any_text_is_a_normalised_base_or_a_public_url_error(url: str) -> None:
    """Never another exception; a base it returns is accepted again unchanged."""
    try:
        base = check_public_url(url)
    except PublicUrlError as refused:
        assert str(refused).startswith("--public-url ")
        return
    assert check_public_url(base) == base and not base.endswith("/")
    assert base.startswith(("https://", "http://")) and not any(c.isspace() for c in base)


def test_the_settings_and_the_front_door_keep_the_normalised_base() -> None:
    """The signature covers ``public_url`` + the webhook's path: a trailing slash kept made
    every webhook's URL ``https://host//voice``, refused as forged."""
    from voxflow_adapters.hosting.dispatch import DispatchStore

    assert PhoneSettings(public_url="https://voice.example.com:/").public_url == (
        "https://voice.example.com")
    store = DispatchStore("postgresql://nobody@127.0.0.1:1/none", kind="phone")  # (unused)
    door = PhoneFrontDoor(store, None, signature=None,
                          public_url="https://voice.example.com/")
    assert door.public_url == "https://voice.example.com"


def test_the_front_door_refuses_a_public_url_that_cannot_be_right() -> None:
    from voxflow_adapters.hosting.dispatch import DispatchStore

    store = DispatchStore("postgresql://nobody@127.0.0.1:1/none", kind="phone")  # (unused)
    with pytest.raises(PublicUrlError, match="carries credentials"):
        PhoneFrontDoor(store, None, signature=None, public_url="https://a:b@voice.example.com")


def test_voxflow_phone_refuses_such_a_public_url_before_loading_anything() -> None:
    clean = {k: v for k, v in os.environ.items() if k != "VOXFLOW_TWILIO_AUTH_TOKEN"}
    done = subprocess.run(
        [sys.executable, "-m", "voxflow.cli", "phone", "--no-signature", "--public-url",
         "https://ops:hunter2@voice.example.com"], env=clean, capture_output=True,
        text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "carries credentials" in done.stderr and "hunter2" not in done.stderr
    assert "Traceback" not in done.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _listening(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def _no_calls(*args: object, **kwargs: object) -> object:
    raise AssertionError("no call may start")


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[web.Application], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner, base = await _listening(app)
        runners.append(runner)
        return base

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_the_probe_knows_this_server_from_another_a_foreign_one_and_nothing(
    serve: Callable[[web.Application], Awaitable[str]],
) -> None:
    this = PhoneServer(_no_calls, None)  # type: ignore[arg-type]
    other = PhoneServer(_no_calls, None)  # type: ignore[arg-type]
    here, there = await serve(this.app()), await serve(other.app())
    foreign = web.Application()
    foreign.router.add_get("/health", _up)
    foreign_url = await serve(foreign)
    missing = await serve(web.Application())  # (every path: 404)
    nothing = f"http://127.0.0.1:{_free_port()}"

    async def probe(url: str) -> str | None:
        return await probe_public_url(url + "/", this.instance, listening="127.0.0.1:8080",
                                      within=5.0)

    assert await probe(here) is None
    found = {name: await probe(url) for name, url in (
        ("other", there), ("foreign", foreign_url), ("missing", missing),
        ("nothing", nothing))}
    assert f"--public-url {there} leads to another server, not this process" in str(
        found["other"])
    assert "does not lead to a voxflow server" in str(found["foreign"])
    assert "answered HTTP 404" in str(found["missing"])
    assert f"--public-url {nothing} could not be reached from this machine" in str(
        found["nothing"])
    for problem in found.values():  # each says the fix
        assert problem is not None
        assert "(it listens on 127.0.0.1:8080" in problem and "give the right --public-url" \
            in problem


async def test_a_front_door_behind_a_load_balancer_accepts_a_sibling_of_its_deployment(
    pg_schema_url: str, serve: Callable[[web.Application], Awaitable[str]],
) -> None:
    """Front doors behind one load balancer share the public URL: the probe reaches any
    of them. Two real front doors on the same tables answer the same deployment (a hash:
    neither the URL, the schema nor a credential), and each accepts the other's answer;
    a front door of other tables, a worker's own check (no deployment: its own instance
    only) still warn."""
    import psycopg
    from voxflow_adapters.hosting.dispatch import DispatchStore

    other_schema = f"{pg_schema_url.rpartition('%3D')[2]}_other"
    doors = [PhoneFrontDoor(DispatchStore(pg_schema_url, kind="phone"), None, signature=None)
             for _ in range(2)]
    stranger = PhoneFrontDoor(DispatchStore(pg_schema_url, schema=other_schema,
                                            kind="phone"), None, signature=None)
    try:
        for door in (*doors, stranger):
            await door.start()
        first, second, elsewhere = [await serve(d.app()) for d in (*doors, stranger)]
        assert doors[0].deployment is not None
        assert doors[0].deployment == doors[1].deployment != stranger.deployment
        async with aiohttp.ClientSession() as http, http.get(second + "/health") as answer:
            body = await answer.text()
        assert doors[1].deployment in body and doors[1].instance in body
        assert other_schema.rpartition("_")[0] not in body and "postgresql" not in body

        async def probe(url: str, door: PhoneFrontDoor, *, as_worker: bool = False
                        ) -> str | None:
            return await probe_public_url(
                url, door.instance, listening="127.0.0.1:8080", within=5.0,
                deployment=None if as_worker else door.deployment)

        assert await probe(first, doors[0]) is None
        assert await probe(second, doors[0]) is None  # (the sibling answered)
        assert await probe(first, doors[1]) is None
        worker_like = await probe(second, doors[0], as_worker=True)
        assert "leads to another server, not this process" in str(worker_like)
        foreign = await probe(elsewhere, doors[0])
        assert f"--public-url {elsewhere} leads to another server, neither this process " \
            "nor a front door of its deployment" in str(foreign)
    finally:
        for door in (*doors, stranger):
            await door.aclose()
        with psycopg.connect(pg_schema_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{other_schema}" CASCADE')


async def _up(request: web.Request) -> web.Response:
    return web.Response(text="up")


def test_a_phone_front_door_whose_public_url_leads_elsewhere_warns_once_with_the_fix(
    pg_schema_url: str,
) -> None:
    """The real command: ``voxflow phone --front-door`` (no models) given a public URL where
    nothing listens says so once it listens, with the fix, and goes on serving."""
    port, elsewhere = _free_port(), _free_port()
    env = {**os.environ, "VOXFLOW_DATABASE_URL": pg_schema_url,
           "VOXFLOW_TWILIO_AUTH_TOKEN": "t0ken", "VOXFLOW_LOG_LEVEL": "INFO"}
    process = subprocess.Popen(
        [sys.executable, "-m", "voxflow.cli", "phone", "--front-door", "--port", str(port),
         "--public-url", f"http://127.0.0.1:{elsewhere}/"], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "could not be reached" in line:
                break
        assert process.poll() is None, "".join(lines)  # (a warning: it goes on serving)
    finally:
        process.terminate()
        process.wait(timeout=30)
    said = [line for line in lines if "--public-url" in line]
    assert len(said) == 1, "".join(lines)
    assert f"--public-url http://127.0.0.1:{elsewhere} could not be reached" in said[0]
    assert f"(it listens on 127.0.0.1:{port}" in said[0]
    assert any(f"front door is listening: webhook http://127.0.0.1:{elsewhere}/voice "
               in line for line in lines), "".join(lines)  # (the base normalised)


def test_the_probe_refuses_a_malformed_base() -> None:
    with pytest.raises(PublicUrlError):
        asyncio.run(probe_public_url("ftp://x", "id", listening="127.0.0.1:1"))
