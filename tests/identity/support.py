"""Real stand-ins for Azure's identity parts, on loopback: a TLS certificate, Azurite in OAuth
mode, an App Service managed-identity endpoint, and the settings a Function app would have.

* ``make_certificate(dir)``: a self-signed certificate for 127.0.0.1 / localhost (PEM files),
  trusted by the processes under test through the SDK's CA bundle settings
  (``REQUESTS_CA_BUNDLE`` for the synchronous clients, ``SSL_CERT_FILE`` for aiohttp's).
* ``start_oauth_azurite(...)``: Azurite over HTTPS with ``--oauth basic``: it checks a bearer
  token's issuer, audience and lifetime (not its signature).
* ``IdentityEndpoint``: the ``IDENTITY_ENDPOINT`` / ``IDENTITY_HEADER`` protocol of App
  Service (``api-version=2019-08-01``): tokens are JWTs for the asked resource with an Entra
  issuer, each remembered so a server can check that what it is sent was issued here and is
  still valid. It can be stopped and started again on the same port (an identity endpoint
  that is down), and told to issue short-lived tokens or tokens for the wrong audience.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import secrets
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from durable_host.ops import azurite

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT_ID = "3f1c9a5e-0d2b-4c1e-9a7f-5b6d8e2c1a90"  # the user-assigned identity of the tests


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate and its key for 127.0.0.1 and localhost: (cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@dataclass
class OAuthAzurite:
    process: subprocess.Popen[bytes]
    ports: tuple[int, int, int]

    def uri(self, service: str) -> str:
        port = self.ports[("blob", "queue", "table").index(service)]
        return f"https://127.0.0.1:{port}/{azurite.DEV_ACCOUNT}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_oauth_azurite(cert: Path, key: Path, log: Path, timeout: float = 30.0) -> OAuthAzurite:
    exe = azurite.find_executable()
    assert exe is not None, "Azurite is not installed (npm ci)"
    ports = azurite.free_ports(3)
    args = [str(exe), "--silent", "--skipApiVersionCheck", "--loose", "--disableTelemetry"]
    for service, port in zip(("blob", "queue", "table"), ports, strict=True):
        args += [f"--{service}Host", "127.0.0.1", f"--{service}Port", str(port)]
    args += ["--inMemoryPersistence", "--oauth", "basic", "--cert", str(cert), "--key", str(key)]
    with open(log, "ab") as out:
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    deadline = time.monotonic() + timeout
    while not azurite.answers("127.0.0.1", ports, 0.2):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"Azurite (OAuth) did not start; see {log}")
        time.sleep(0.05)
    return OAuthAzurite(process, (ports[0], ports[1], ports[2]))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


@dataclass
class IdentityEndpoint:
    """The App Service managed-identity endpoint (see the module docstring)."""

    header: str = field(default_factory=lambda: secrets.token_hex(16))
    lifetime: float = 3600.0  # seconds a token is valid
    audience: str | None = None  # issue tokens for this audience instead of the resource
    requests: list[dict[str, str | None]] = field(default_factory=list)
    issued: dict[str, dict[str, Any]] = field(default_factory=dict)
    port: int = 0
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/msi/token"

    def env(self) -> dict[str, str]:
        return {"IDENTITY_ENDPOINT": self.url, "IDENTITY_HEADER": self.header}

    def start(self) -> IdentityEndpoint:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                endpoint._answer(self)

            def log_message(self, *_args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Down: the port refuses connections until ``start()``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def valid(self, token: str, audience: str) -> bool:
        """Issued here, for ``audience``, and not expired."""
        with self._lock:
            claims = self.issued.get(token)
        return bool(claims and claims["aud"] == audience and claims["exp"] > time.time())

    def resources(self) -> list[str | None]:
        with self._lock:
            return [r["resource"] for r in self.requests]

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path != "/msi/token" or handler.headers.get("X-IDENTITY-HEADER") != self.header:
            return self._send(handler, 401, {"statusCode": 401, "message": "bad identity header"})
        resource = query.get("resource")
        with self._lock:
            self.requests.append(
                {
                    "resource": resource,
                    "client_id": query.get("client_id"),
                    "api_version": query.get("api-version"),
                }
            )
        if not resource:
            return self._send(handler, 400, {"statusCode": 400, "message": "no resource"})
        now = int(time.time())
        expires = now + int(self.lifetime)
        claims = {
            "aud": self.audience or resource,
            "iss": f"https://sts.windows.net/{TENANT}/",
            "iat": now - 5,
            "nbf": now - 5,
            "exp": expires,
            "appid": query.get("client_id") or "system-assigned",
            "oid": str(uuid.uuid4()),
            "tid": TENANT,
        }
        token = ".".join(
            [
                _b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode()),
                _b64(json.dumps(claims).encode()),
                _b64(secrets.token_bytes(32)),
            ]
        )
        with self._lock:
            self.issued[token] = claims
        body = {
            "access_token": token,
            "expires_on": str(expires),
            "resource": resource,
            "token_type": "Bearer",
            "client_id": query.get("client_id") or "system-assigned",
        }
        return self._send(handler, 200, body)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


def identity_settings(
    storage: OAuthAzurite, endpoint: IdentityEndpoint, cert: Path
) -> dict[str, str]:
    """The settings of a Function app on identity-based storage, pointed at the stand-ins."""
    return {
        **endpoint.env(),
        "REQUESTS_CA_BUNDLE": str(cert),
        "SSL_CERT_FILE": str(cert),
        "AzureWebJobsStorage__blobServiceUri": storage.uri("blob"),
        "AzureWebJobsStorage__queueServiceUri": storage.uri("queue"),
        "AzureWebJobsStorage__tableServiceUri": storage.uri("table"),
        "AzureWebJobsStorage__credential": "managedidentity",
        "AzureWebJobsStorage__clientId": CLIENT_ID,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
