"""HTTPS for ``voxflow serve``: load a certificate, or make a short-lived self-signed one.

Browsers open the microphone only on a secure origin (HTTPS, or ``localhost``), so a
call from a phone or a second laptop needs ``serve`` over HTTPS (or behind an HTTPS
reverse proxy). :func:`ssl_context` loads a PEM certificate and key for aiohttp;
:func:`self_signed_certificate` makes one for a LAN trial, valid for a few days, naming
exactly the host names and addresses the server is reached by, and says how to trust it.
Every failure is a :class:`TlsError` with one line that names the file and the fix.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aioice.ice
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from voxflow.errors import VoxflowError

__all__ = ["SelfSigned", "TlsError", "certificate_names", "self_signed_certificate",
           "ssl_context"]

SELF_SIGNED_DAYS = 7
"""How long a ``--self-signed`` certificate is valid (a trial, not a deployment)."""


class TlsError(VoxflowError, ValueError):
    """A certificate or key cannot be used; the message names the file and the fix."""


def ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side TLS context from a PEM certificate (chain) and its private key.

    Raises:
        TlsError: a file is missing or unreadable, not PEM, or the key does not match.
    """
    for what, path in (("certificate", cert), ("key", key)):
        if not path.is_file():
            raise TlsError(f"the TLS {what} {path} does not exist (give a PEM file, or use "
                           "--self-signed for a trial)")
        if not os.access(path, os.R_OK):
            raise TlsError(f"the TLS {what} {path} is not readable (check its permissions)")
        try:
            with path.open("rb") as file:
                head = file.read(65536)
        except OSError as exc:
            raise TlsError(f"cannot read the TLS {what} {path} ({exc.strerror or exc})") from None
        if b"-----BEGIN " not in head:
            raise TlsError(f"the TLS {what} {path} is not a PEM file (expected a "
                           "'-----BEGIN ...' block; convert DER with openssl)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        reason = exc.reason or exc.strerror or str(exc)
        raise TlsError(f"cannot use the TLS certificate {cert} with the key {key} ({reason}): "
                       "both must be PEM files and the key must be the certificate's "
                       "(unencrypted)") from None
    except OSError as exc:
        raise TlsError(f"cannot read the TLS certificate/key ({exc.strerror or exc})") from None
    return context


def certificate_names(host: str) -> tuple[str, ...]:
    """The names a server bound to ``host`` is reached by: ``localhost`` and the loopback
    addresses, the host itself, and for a wildcard bind the machine's name and
    interface addresses."""
    names = ["localhost", "127.0.0.1", "::1"]
    if host in ("0.0.0.0", "::", ""):
        names.append(socket.gethostname())
        names.extend(aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=host == "::"))
    else:
        names.append(host)
    return tuple(dict.fromkeys(n for n in names if n))


@dataclass(frozen=True, slots=True)
class SelfSigned:
    """A generated certificate: where it is, what it names and how to recognise it."""

    cert: Path
    key: Path
    names: tuple[str, ...]
    fingerprint: str
    """SHA-256 of the certificate, as browsers show it (``AB:CD:…``)."""
    not_after: datetime.datetime

    def how_to_trust(self) -> str:
        """What to tell the person opening the page on another device."""
        return (
            f"self-signed certificate {self.cert} for {', '.join(self.names)}, valid until "
            f"{self.not_after:%Y-%m-%d %H:%M} UTC, SHA-256 {self.fingerprint}. Browsers warn "
            "once: check that fingerprint in the warning's certificate details and proceed, "
            "or trust it on the device (copy the .pem there and import it as a trusted "
            "certificate: Android Settings > Security > Install a certificate; iOS open it, "
            "then Settings > General > About > Certificate Trust Settings; desktop "
            "browsers: Settings > Privacy and security > Manage certificates)"
        )


def self_signed_certificate(names: Sequence[str], directory: Path, *,
                            days: int = SELF_SIGNED_DAYS) -> SelfSigned:
    """Write ``self-signed.pem`` and ``self-signed.key`` (mode 0600) into ``directory``.

    An existing pair is reused while it names the same hosts and stays valid for a day
    more (so a device that trusted it keeps trusting it); otherwise a new P-256 key and
    certificate, valid for ``days``, replace it.

    Raises:
        TlsError: the directory cannot be written.
    """
    names = tuple(dict.fromkeys(names))
    cert_path, key_path = directory / "self-signed.pem", directory / "self-signed.key"
    now = datetime.datetime.now(datetime.UTC)
    existing = _reusable(cert_path, key_path, names, now)
    if existing is not None:
        return existing
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"voxflow serve ({names[0]})")])
    alternative: list[x509.GeneralName] = []
    for name in names:
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternative.append(x509.DNSName(name))
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(key_path, flags, 0o600)
        with os.fdopen(fd, "wb") as out:
            if hasattr(os, "fchmod"):  # (O_CREAT's mode is only for a new file)
                os.fchmod(fd, 0o600)
            out.write(key.private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    except OSError as exc:
        raise TlsError(f"cannot write the self-signed certificate to {directory} "
                       f"({exc.strerror or exc}): set VOXFLOW_HOME to a writable folder") from None
    return _described(cert_path, key_path, certificate)


def _described(cert_path: Path, key_path: Path, certificate: object) -> SelfSigned:
    assert isinstance(certificate, x509.Certificate)
    alternative = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    names = tuple(str(v) for v in alternative.value.get_values_for_type(x509.DNSName)) + tuple(
        str(v) for v in alternative.value.get_values_for_type(x509.IPAddress))
    digest = certificate.fingerprint(hashes.SHA256())
    return SelfSigned(cert=cert_path, key=key_path, names=names,
                      fingerprint=":".join(f"{b:02X}" for b in digest),
                      not_after=certificate.not_valid_after_utc)


def _reusable(cert_path: Path, key_path: Path, names: tuple[str, ...],
              now: datetime.datetime) -> SelfSigned | None:
    try:
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if not key_path.is_file():
            return None
        described = _described(cert_path, key_path, certificate)
    except (OSError, ValueError, x509.ExtensionNotFound):
        return None
    wanted = {str(ipaddress.ip_address(n)) if _is_ip(n) else n for n in names}
    if set(described.names) != wanted:
        return None
    if described.not_after - now < datetime.timedelta(days=1):
        return None
    return described


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
