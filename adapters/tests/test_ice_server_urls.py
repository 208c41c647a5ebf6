"""``--ice-server`` URLs are checked at start-up the way aiortc reads them: a malformed
one used to pass and then refuse every offer (``malformed uri``). The check is fuzzed
against aiortc itself, and its messages never show a credential put in the URL."""

from __future__ import annotations

import pytest
from aiortc import RTCIceServer
from aiortc.rtcicetransport import RTCIceGatherer, connection_kwargs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from voxflow_adapters.webrtc import IceServer, IceUrlError, check_ice_url
from voxflow_adapters.webrtc.command import ServeOptionError, ice_servers_from

from voxflow.cli import main

pytestmark = pytest.mark.unit

SECRET = "hunter2"

# what an operator typed (the probe's three, and others aiortc refuses or ignores)
MALFORMED = [
    ("stun:", "names no host"),
    ("turn:[::1]:3478", "IPv6"),
    ("stun:stun.example.org:3478\n", "'\\n'"),
    ("stun:stun.example.org\n", "'\\n'"),  # aiortc takes it, and resolves 'host\n'
    ("stun: stun.example.org", "' '"),
    ("stun:stun.example.org:", "port"),
    ("stun:stun.example.org:0", "port"),
    ("stun:stun.example.org:70000", "port"),
    ("stun:stun.example.org?transport=udp", "no ?transport="),
    ("turn:turn.example.org?transport=sctp", "udp|tcp"),  # aiortc ignores it silently
    ("turns:turn.example.org?transport=udp", "tcp only"),
    ("stuns:stun.example.org", "stuns:"),  # aiortc ignores it silently
    ("stun.example.org:3478", "must start with stun:"),
    ("stun:stun_example.org", "not a host name"),
    ("stun:1.2.3.999", "not a host name"),
]


@pytest.mark.parametrize(("url", "says"), MALFORMED)
def test_a_malformed_ice_server_is_refused_at_start_up_naming_it(
    url: str, says: str, capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ServeOptionError) as refused:
        ice_servers_from([url], username="alice", credential=SECRET)
    line = str(refused.value)
    assert line.startswith("--ice-server '") and says in line, line
    assert "\n" not in line and "see voxflow serve --help" in line
    with pytest.raises(ValidationError):  # the settings of a server built in code too
        IceServer(urls=(url,))
    # the command: one line, exit 2, before anything loads
    assert main(["serve", "--ice-server", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --ice-server") and says in err, err


@pytest.mark.parametrize("url", [
    "turn:turn.example.org:3478?credential=hunter2",
    "turn:alice:hunter2@turn.example.org:3478",
    "turn:hunter2@turn.example.org",
    "turns:turn.example.org?transport=tcp&password=hunter2",
    "turn:turn.example.org?hunter2",
    "stun:alice:hunter2@[::1]\n",
])
def test_a_credential_in_the_url_is_refused_and_never_echoed(
    url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ServeOptionError) as refused:
        ice_servers_from([url], username="alice", credential="other")
    line = str(refused.value)
    assert SECRET not in line and "VOXFLOW_TURN_CREDENTIAL" in line, line
    with pytest.raises(ValidationError) as invalid:
        IceServer(urls=(url,), username="alice", credential="other")
    assert SECRET not in str(invalid.value)  # a traceback or a log line of it
    assert main(["serve", "--ice-server", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and SECRET not in err, err


def test_well_formed_servers_pass_as_typed() -> None:
    urls = ["stun:stun.example.org", "stun:192.0.2.1:19302", "turn:turn.example.org:3478",
            "turn:turn.example.org?transport=tcp", "turns:turn.example.org:5349",
            "turns:turn.example.org?transport=tcp", "stun:localhost.:3478"]
    servers = ice_servers_from(urls, username="alice", credential=SECRET)
    assert [s.urls[0] for s in servers] == urls
    # aiortc takes each: a gatherer is built and uses the server (not skipped)
    for url in urls:
        kwargs = connection_kwargs([RTCIceServer(urls=[url], username="a", credential="b")])
        assert "stun_server" in kwargs or "turn_server" in kwargs, url


# -- fuzzing against aiortc --------------------------------------------------------------

def aiortc_uses(url: str) -> bool:
    """Whether aiortc builds a gatherer for ``url`` and uses the server (a STUN or TURN
    address it will contact, with a port a socket can reach)."""
    server = RTCIceServer(urls=[url], username="alice", credential="secret")
    try:
        RTCIceGatherer(iceServers=[server])  # raises "malformed uri" as an offer did
        kwargs = connection_kwargs([server])
    except ValueError:
        return False
    address = kwargs.get("stun_server") or kwargs.get("turn_server")
    return address is not None and 1 <= address[1] <= 65535


_labels = st.text(alphabet="abz09-", min_size=1, max_size=10).map(
    lambda label: f"x{label}x")  # (a DNS label: no hyphen at either end)
_hosts = st.one_of(
    st.lists(_labels, min_size=1, max_size=4).map(".".join).filter(
        lambda h: not h.replace(".", "").isdigit()),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
    st.ip_addresses(v=6).map(str),
    st.text(alphabet="ab.-_:[]@?=% \n\t\x00é1", max_size=12),
)
_ports = st.one_of(st.none(), st.integers(-1, 70_000).map(str),
                   st.text(alphabet="0123456789a: \n", max_size=6))
_queries = st.one_of(
    st.none(),
    st.sampled_from(["transport=udp", "transport=tcp", "transport=", "transport=UDP",
                     "transport=tls", "credential=secret", "transport=udp&x=1", ""]),
    st.text(alphabet="transpoudc=&?\n", max_size=16),
)
_schemes = st.sampled_from(["stun", "turn", "turns", "stuns", "STUN", "http", "", "turn "])


@st.composite
def _ice_urls(draw: st.DrawFn) -> str:
    url = f"{draw(_schemes)}:"
    if draw(st.booleans()):
        url += draw(st.sampled_from(["alice@", "alice:secret@", "@"]))
    url += draw(_hosts)
    port = draw(_ports)
    url += "" if port is None else f":{port}"
    query = draw(_queries)
    return url + ("" if query is None else f"?{query}")


_FUZZ = settings(max_examples=1500, derandomize=True, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(st.one_of(_ice_urls(), st.text(max_size=40),
                 st.text(alphabet="stunr:.?=@[]1-a \n", max_size=30)))
def test_fuzz_what_the_check_accepts_aiortc_uses(url: str) -> None:
    try:
        check_ice_url(url)
    except IceUrlError as exc:
        message = str(exc)
        assert "\n" not in message and "secret" not in message
        if aiortc_uses(url):  # refused though aiortc would use it: only for a good reason
            assert (exc.credentials  # a user part, a query: refused, never shown
                    or any(not "!" <= c <= "~" for c in url)  # 'host\n' is looked up
                    or "not a host name" in message  # (aiortc looks up anything)
                    or url.endswith("?transport=")), (url, message)  # (aiortc: udp)
    else:
        assert aiortc_uses(url), url
        assert IceServer(urls=(url,)).urls == (url,)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(_labels, st.integers(1, 65535), st.sampled_from(["stun", "turn", "turns"]),
       st.booleans())
def test_fuzz_every_well_formed_url_passes(label: str, port: int, scheme: str,
                                           transport: bool) -> None:
    url = f"{scheme}:{label}.example.org:{port}"
    if transport and scheme != "stun":
        url += "?transport=tcp"
    assert check_ice_url(url) == url and aiortc_uses(url)
