"""``voxflow serve`` over HTTPS: an aiortc caller and headless Chromium call it with a
self-signed certificate; the token and Origin checks hold over HTTPS and behind a reverse
proxy (nginx, whose forwarding headers count only when trusted); host candidates follow
the bound interface. Everything stays on this machine."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from voxflow_adapters.hosting.tls import SelfSigned, certificate_names, self_signed_certificate
from voxflow_adapters.webrtc import (
    Call,
    IceServer,
    PeerSettings,
    ServerSettings,
    WebRtcPeer,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller, OfferRejected
from voxflow_voice.engines import VoiceEngines

pytestmark = pytest.mark.models

CHROMIUM = Path("/usr/bin/chromium")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
LOOPBACK = PeerSettings(ice_host_addresses=("127.0.0.1",))


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> SelfSigned:
    return self_signed_certificate((*certificate_names("127.0.0.1"), "voxflow.test"),
                                   tmp_path_factory.mktemp("tls"))


def trusting(made: SelfSigned) -> ssl.SSLContext:
    """A client context that trusts exactly the self-signed certificate (verification on)."""
    return ssl.create_default_context(cafile=str(made.cert))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def https_server(
    engines: VoiceEngines, made: SelfSigned, **options: Any
) -> AsyncIterator[tuple[WebRtcServer, list[tuple[WebRtcPeer, Call]]]]:
    calls: list[tuple[WebRtcPeer, Call]] = []
    settings = ServerSettings(**{"port": 0, "peer": LOOPBACK, "tls_cert": made.cert,
                                 "tls_key": made.key, **options})
    server = WebRtcServer(assistant_call_factory(), engines, settings=settings,
                          on_call=lambda peer, call: calls.append((peer, call)))
    async with server:
        yield server, calls


async def refused(caller: LoopbackCaller) -> OfferRejected:
    try:
        with pytest.raises(OfferRejected) as info:
            await caller.connect()
    finally:
        await caller.aclose()
    return info.value


async def test_an_aiortc_caller_calls_over_https_and_token_and_origin_still_hold(
    engines: VoiceEngines, certificate: SelfSigned,
) -> None:
    async with https_server(engines, certificate) as (server, calls):
        assert server.url.startswith(f"https://127.0.0.1:{server.port}/?token=")
        base = f"https://127.0.0.1:{server.port}"
        context = trusting(certificate)
        wrong_token = await refused(LoopbackCaller(base, "not-the-token", ssl=context))
        http_origin = await refused(LoopbackCaller(
            base, server.token, ssl=context, origin=f"http://127.0.0.1:{server.port}"))
        foreign = await refused(LoopbackCaller(base, server.token, ssl=context,
                                               origin="https://evil.example"))
        async with LoopbackCaller(base, server.token, ssl=context,
                                  origin=f"https://localhost:{server.port}") as caller:
            hello = await caller.wait_message("hello")
            caller.send({"v": 1, "type": "hangup"})
            await asyncio.wait_for(server.wait_idle(), 20)
        with pytest.raises(aiohttp.ClientConnectorCertificateError):  # verification is on
            await LoopbackCaller(base, server.token, ssl=ssl.create_default_context()).connect()
        async with aiohttp.ClientSession() as http, http.get(
            f"https://127.0.0.1:{server.port}/", ssl=context
        ) as page:
            page_status = page.status
        stats = server.statistics()
    assert (wrong_token.status, http_origin.status, foreign.status) == (401, 403, 403)
    assert hello["session_id"] and page_status == 200
    assert stats.accepted == 1 and stats.rejected == {"token": 1, "origin": 2}
    assert calls[0][0].statistics().close_reason == "the page hung up"


async def _offer_status(url: str, token: str, headers: dict[str, str],
                        context: ssl.SSLContext) -> int:
    """POST a well-formed offer body with an unusable SDP: 403 if the Origin is refused,
    400 (the SDP) once the Origin and the token pass."""
    async with aiohttp.ClientSession() as http, http.post(
        f"{url}/offer", json={"type": "offer", "sdp": "v=0\r\n"}, ssl=context,
        headers={"Authorization": f"Bearer {token}", **headers},
    ) as response:
        return response.status


async def test_forwarded_headers_count_only_when_trusted(
    engines: VoiceEngines, certificate: SelfSigned,
) -> None:
    forwarded = {"Origin": "https://voice.example", "X-Forwarded-Proto": "https",
                 "X-Forwarded-Host": "voice.example"}
    context = trusting(certificate)
    async with https_server(engines, certificate) as (server, _):
        ignored = await _offer_status(f"https://127.0.0.1:{server.port}", server.token,
                                      forwarded, context)
    async with https_server(engines, certificate, trust_forwarded=True) as (server, _):
        base = f"https://127.0.0.1:{server.port}"
        trusted = await _offer_status(base, server.token, forwarded, context)
        other = await _offer_status(base, server.token,
                                    {**forwarded, "X-Forwarded-Host": "evil.example"}, context)
    assert (ignored, trusted, other) == (403, 400, 403)


def _lan_address() -> str | None:
    import aioice.ice

    addresses = aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=False)
    return addresses[0] if addresses else None


async def test_host_candidates_follow_the_bound_interface(engines: VoiceEngines) -> None:
    address = _lan_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 interface")
    # The machine's own address: the packets never leave it.
    settings = ServerSettings(host=address, port=0)
    async with WebRtcServer(assistant_call_factory(), engines, settings=settings) as server:
        caller = LoopbackCaller(f"http://{address}:{server.port}", server.token,
                                ice_host_addresses=(address,))
        async with caller:
            await caller.wait_message("hello")
            answer = caller.answer_sdp
    assert answer is not None
    candidates = [line for line in answer.splitlines() if line.startswith("a=candidate:")]
    assert candidates and all(f" {address} " in line for line in candidates), candidates


# -- a reverse proxy --------------------------------------------------------------------

README = Path(__file__).resolve().parents[2] / "README.md"

NGINX_CONF = """\
pid {run}/nginx.pid;
error_log {run}/error.log;
events {{}}
http {{
    access_log off;
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
{server}
}}
"""


def readme_server_block(port: int, cert: Path, key: Path, upstream: int) -> str:
    """The README's nginx ``server`` block, with this test's port, certificate and
    upstream in place of the example's."""
    text = README.read_text()
    block = text.split("```nginx\n", 1)[1].split("```", 1)[0]
    for example, here in (("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;"),
                          ("/etc/ssl/voxflow/fullchain.pem", str(cert)),
                          ("/etc/ssl/voxflow/privkey.pem", str(key)),
                          ("http://127.0.0.1:8080;", f"http://127.0.0.1:{upstream};")):
        assert block.count(example) == 1, f"the README's nginx block lost {example!r}"
        block = block.replace(example, here)
    return block


@contextlib.contextmanager
def nginx(run: Path, made: SelfSigned, upstream: int) -> Iterator[int]:
    port = free_port()
    run.mkdir(parents=True, exist_ok=True)
    conf = run / "nginx.conf"
    conf.write_text(NGINX_CONF.format(
        run=run, server=readme_server_block(port, made.cert, made.key, upstream)))
    process = subprocess.Popen([NGINX, "-p", str(run), "-c", str(conf), "-g", "daemon off;"],
                               stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
                break
            if process.poll() is not None:
                error = process.stderr.read() if process.stderr else b""
                raise RuntimeError(f"nginx exited: {error.decode(errors='replace')}")
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.skipif(not Path(NGINX).exists(),
                    reason="nginx is missing (apt-get install nginx-light; .ci/run installs it)")
async def test_a_call_through_an_nginx_https_proxy_needs_trust_forwarded(
    engines: VoiceEngines, certificate: SelfSigned, tmp_path: Path,
) -> None:
    context = trusting(certificate)
    for trust in (False, True):
        settings = ServerSettings(port=0, peer=LOOPBACK, trust_forwarded=trust)
        async with WebRtcServer(assistant_call_factory(), engines, settings=settings) as server:
            assert server.port is not None
            with nginx(tmp_path / f"nginx-{trust}", certificate, server.port) as port:
                base = f"https://127.0.0.1:{port}"
                caller = LoopbackCaller(base, server.token, ssl=context, origin=base)
                if not trust:
                    rejected = await refused(caller)
                    continue
                async with caller:
                    hello = await caller.wait_message("hello")
                    caller.send({"v": 1, "type": "hangup"})
                    await asyncio.wait_for(server.wait_idle(), 20)
                async with aiohttp.ClientSession() as http, http.get(
                        f"{base}/", ssl=context) as page:
                    page_status = page.status
    assert rejected.status == 403 and base.replace(str(port), "") in rejected.reason
    assert hello["session_id"] and page_status == 200


# -- Chromium -----------------------------------------------------------------------------

_ARGS = [
    "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--autoplay-policy=no-user-gesture-required",
    # Test only: the self-signed certificate is not in Chromium's trust store.
    "--ignore-certificate-errors",
    # An origin that is secure only through HTTPS (127.0.0.1 and localhost always are).
    "--host-resolver-rules=MAP voxflow.test 127.0.0.1",
]


@pytest.mark.skipif(not CHROMIUM.exists(),
                    reason="Debian's chromium is missing (/usr/bin/chromium); "
                           ".ci/run installs it with apt-get")
async def test_chromium_calls_over_https_and_shows_the_ice_path(
    engines: VoiceEngines, certificate: SelfSigned,
) -> None:
    from playwright.async_api import async_playwright

    port = free_port()
    origin = f"https://voxflow.test:{port}"
    # Default ICE host addresses: Chromium ignores loopback candidates (see the http test).
    async with https_server(engines, certificate, port=port, peer=PeerSettings(),
                            allowed_origins=(origin,)) as (server, calls), \
            async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM),
                                                   headless=True, args=_ARGS)
        try:
            page = await browser.new_page(bypass_csp=True)
            console: list[str] = []
            page.on("console", lambda message: console.append(message.text))
            await page.goto(f"{origin}/?token={server.token}")
            secure = await page.evaluate("window.isSecureContext")
            await page.click("#connect")
            await page.wait_for_function(
                "document.querySelector('#connection').dataset.state === 'connected'",
                timeout=20_000)
            await page.wait_for_function(
                "window.voxflow.messages.some(m => m.type === 'hello')", timeout=20_000)
            await page.wait_for_function(
                "document.querySelector('#ice').textContent.includes('host')", timeout=10_000)
            ice = await page.inner_text("#ice")
            await page.click("#connect")  # hang up
            await asyncio.wait_for(server.wait_idle(), 20)
        finally:
            await browser.close()
    assert secure is True, console
    assert ice.startswith(("connected", "completed")) and "host" in ice, ice
    assert calls[0][0].statistics().close_reason == "the page hung up"


@pytest.mark.skipif(not CHROMIUM.exists(),
                    reason="Debian's chromium is missing (/usr/bin/chromium); "
                           ".ci/run installs it with apt-get")
async def test_a_call_that_cannot_connect_shows_the_ice_state_and_the_fix(
    engines: VoiceEngines, certificate: SelfSigned,
) -> None:
    from playwright.async_api import async_playwright

    # The server offers no candidate at all (as if none of its addresses were reachable).
    unreachable = PeerSettings(ice_host_addresses=())
    async with https_server(engines, certificate, peer=unreachable) as (server, _), \
            async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM),
                                                   headless=True, args=_ARGS)
        try:
            page = await browser.new_page(bypass_csp=True)
            await page.goto(server.url)
            started = asyncio.get_running_loop().time()
            await page.click("#connect")
            await page.wait_for_function(
                "document.querySelector('#ice').dataset.state === 'failed'", timeout=60_000)
            print(f"ICE failure shown after {asyncio.get_running_loop().time() - started:.1f} s")
            ice = await page.inner_text("#ice")
            notice = await page.inner_text("#notice")
            await asyncio.wait_for(server.wait_idle(), 30)
            ended = server.statistics().ended
        finally:
            await browser.close()
    assert ended[0].close_reason == "ICE/DTLS did not connect within 15 s"
    assert ice.endswith("(no candidate pair)"), ice
    assert notice.startswith(("The connection failed (ICE state: ",
                              "The connection did not connect within 15 s (ICE state: ")), notice
    assert "could not reach any address the server offered (server candidates: none)" in notice
    assert "--host" in notice and "TURN" in notice


TURN = IceServer(urls=("turn:127.0.0.1:9",), username="voxflow", credential="turn-secret")


async def test_the_page_gets_the_servers_ice_servers_only_with_the_token(
    engines: VoiceEngines, certificate: SelfSigned,
) -> None:
    context = trusting(certificate)
    peer = PeerSettings(ice_host_addresses=("127.0.0.1",), ice_servers=(TURN,))
    async with https_server(engines, certificate, peer=peer) as (server, _), \
            aiohttp.ClientSession() as http:
        url = f"https://127.0.0.1:{server.port}/ice-servers"

        async def get(token: str, **headers: str) -> tuple[int, Any]:
            async with http.get(url, ssl=context, headers={
                "Authorization": f"Bearer {token}", **headers}) as response:
                return response.status, await response.json()

        given = await get(server.token, Origin=f"https://localhost:{server.port}")
        no_token = await get("")
        foreign = await get(server.token, Origin="https://evil.example")
    assert given == (200, {"ice_servers": [{"urls": ["turn:127.0.0.1:9"], "username": "voxflow",
                                             "credential": "turn-secret"}]})
    assert no_token[0] == 401 and "turn-secret" not in str(no_token[1])
    assert foreign[0] == 403 and "turn-secret" not in str(foreign[1])


@pytest.mark.skipif(not CHROMIUM.exists(),
                    reason="Debian's chromium is missing (/usr/bin/chromium); "
                           ".ci/run installs it with apt-get")
async def test_the_pages_peer_connection_uses_the_servers_ice_servers(
    engines: VoiceEngines, certificate: SelfSigned,
) -> None:
    from playwright.async_api import async_playwright

    peer = PeerSettings(ice_host_addresses=("127.0.0.1",), ice_servers=(TURN,))
    async with https_server(engines, certificate, peer=peer) as (server, _), \
            async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM),
                                                   headless=True, args=_ARGS)
        try:
            page = await browser.new_page(bypass_csp=True)
            await page.goto(server.url)
            await page.click("#connect")
            await page.wait_for_function("window.voxflow.pc", timeout=20_000)
            used = await page.evaluate("window.voxflow.pc.getConfiguration().iceServers")
        finally:
            await browser.close()
    assert used == [{"urls": ["turn:127.0.0.1:9"], "username": "voxflow",
                     "credential": "turn-secret"}]
