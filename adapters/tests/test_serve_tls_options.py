"""``voxflow serve``'s HTTPS and ICE options without a call: certificate and key errors are
one-line messages (exit 2, with the fix), ``--self-signed`` makes a short-lived
certificate for the bound names, TURN credentials come only from the environment."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from voxflow_adapters.hosting.tls import (
    TlsError,
    certificate_names,
    self_signed_certificate,
    ssl_context,
)
from voxflow_adapters.settings import WebRtcSection
from voxflow_adapters.webrtc.command import (
    ServeOptionError,
    build_settings,
    ice_servers_from,
    run_serve,
)

from voxflow.cli import main
from voxflow.settings import Settings

pytestmark = pytest.mark.unit


def serve_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["serve", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_certificate_and_key_errors_are_one_line_with_the_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    made = self_signed_certificate(["localhost"], tmp_path / "a")
    other = self_signed_certificate(["localhost"], tmp_path / "b")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("hello")
    missing = serve_error(capsys, "--tls-cert", str(tmp_path / "no.pem"), "--tls-key",
                          str(made.key))
    assert "does not exist" in missing and "--self-signed" in missing
    assert "go together" in serve_error(capsys, "--tls-cert", str(made.cert))
    assert "go together" in serve_error(capsys, "--tls-key", str(made.key))
    not_pem = serve_error(capsys, "--tls-cert", str(garbage), "--tls-key", str(made.key))
    assert "is not a PEM file" in not_pem
    mismatch = serve_error(capsys, "--tls-cert", str(made.cert), "--tls-key", str(other.key))
    assert "the key must be the certificate's" in mismatch
    both = serve_error(capsys, "--self-signed", "--tls-cert", str(made.cert), "--tls-key",
                       str(made.key))
    assert "drop --tls-cert" in both


def test_turn_credentials_come_from_the_environment_never_the_url(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VOXFLOW_TURN_USERNAME", raising=False)
    monkeypatch.delenv("VOXFLOW_TURN_CREDENTIAL", raising=False)
    needs = serve_error(capsys, "--ice-server", "turn:turn.example:3478")
    assert "VOXFLOW_TURN_USERNAME and VOXFLOW_TURN_CREDENTIAL" in needs
    in_url = serve_error(capsys, "--ice-server", "turn:alice:s3cret@turn.example:3478")
    assert "not in the URL" in in_url and "s3cret" not in in_url
    stun, turn = ice_servers_from(["stun:stun.example:3478", "turns:turn.example:5349"],
                                  username="alice", credential="s3cret")
    assert (stun.username, stun.credential) == (None, None)
    assert (turn.urls, turn.username, turn.credential) == (("turns:turn.example:5349",),
                                                           "alice", "s3cret")
    with pytest.raises(ServeOptionError):
        ice_servers_from(["turn:turn.example?credential=x"], username="a", credential="b")
    # The variables reach the server settings through voxflow's Settings, the secret hidden.
    settings = Settings.from_env({"VOXFLOW_TURN_USERNAME": "alice",
                                  "VOXFLOW_TURN_CREDENTIAL": "s3cret"})
    assert "s3cret" not in repr(settings)
    built = build_settings(host="127.0.0.1", port=0, token=None,
                           ice_servers=["turn:turn.example:3478"],
                           turn_username=settings.section(WebRtcSection).turn_username,
                           turn_credential="s3cret")
    assert built.peer.ice_servers[0].credential == "s3cret"
    assert "s3cret" not in repr(built) and "s3cret" not in str(built.peer)  # logs, errors
    # run_serve hands Settings' credentials on: the TURN URL passes, the bad port is next.
    code = run_serve(flow=None, host="127.0.0.1", port=70_000, token=None,
                     ice_servers=["turn:turn.example:3478"], settings=settings)
    err = capsys.readouterr().err
    assert code == 2 and "port" in err and "TURN" not in err, err


def test_self_signed_certificates_name_the_bound_host_and_are_short_lived(
    tmp_path: Path,
) -> None:
    names = certificate_names("192.0.2.7")
    assert names == ("localhost", "127.0.0.1", "::1", "192.0.2.7")
    wildcard = certificate_names("0.0.0.0")
    assert "localhost" in wildcard and len(wildcard) > 3  # the host name, its interfaces
    made = self_signed_certificate(names, tmp_path)
    cert = x509.load_pem_x509_certificate(made.cert.read_bytes())
    alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert alt.get_values_for_type(x509.DNSName) == ["localhost"]
    assert set(alt.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address(a) for a in ("127.0.0.1", "::1", "192.0.2.7")}
    lifetime = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(days=6) < lifetime <= datetime.timedelta(days=7)
    assert made.key.stat().st_mode & 0o777 == 0o600
    assert made.fingerprint.count(":") == 31 and made.fingerprint in made.how_to_trust()
    assert isinstance(ssl_context(made.cert, made.key), ssl.SSLContext)
    # Reused while valid and naming the same hosts (a device that trusted it still does).
    assert self_signed_certificate(names, tmp_path).fingerprint == made.fingerprint
    assert self_signed_certificate(("localhost",), tmp_path).fingerprint != made.fingerprint


def test_an_unwritable_folder_is_a_tls_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(TlsError, match="VOXFLOW_HOME"):
        self_signed_certificate(["localhost"], blocker / "tls")


def test_a_replaced_self_signed_key_is_private_whatever_was_there(tmp_path: Path) -> None:
    # O_CREAT's mode applies only to a new file: a key file left readable by others
    # (an older run, a copy) must not keep its mode when a new key is written into it.
    stale = tmp_path / "self-signed.key"
    stale.write_text("old")
    stale.chmod(0o644)
    made = self_signed_certificate(["localhost"], tmp_path)
    assert made.key == stale and made.key.stat().st_mode & 0o777 == 0o600
