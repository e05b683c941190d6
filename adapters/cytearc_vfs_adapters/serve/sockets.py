"""The server's listening socket: binding where asked, and what a refusal says.

A port in use, a host that does not resolve or does not listen here is one
:class:`ListenError` whose message names the remedy (``--port``, ``--host``),
as ``docs/serve.md`` shows it.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from cytearc_vfs.errors import VfsError

__all__ = ["ListenError", "is_loopback", "listening_socket"]


class ListenError(VfsError, OSError):
    """The server cannot listen where it was asked to; the message names the remedy.

    ``errno`` is the system's; the message carries no ``[Errno N]`` prefix, so
    the command line prints it as it is.
    """

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.errno = code


def listening_socket(host: str, port: int) -> socket.socket:
    """One listening socket on the first address ``host`` resolves to."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ListenError(
            f"cannot listen on {host!r}: the name does not resolve ({exc.strerror}); give "
            "--host an address or a name this machine resolves",
            exc.errno,
        ) from exc
    family, kind, proto, _, address = infos[0]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        remedy = "choose another --port (0 picks a free one) or --host"
        if exc.errno == errno.EADDRNOTAVAIL:
            # no port helps: the address is not one of this machine's
            remedy = (
                f"{host} is not an address of this machine: give --host one of its addresses "
                "(127.0.0.1: this machine only; 0.0.0.0: all its interfaces)"
            )
        raise ListenError(
            f"cannot listen on {host}:{port} ({exc.strerror}); {remedy}", exc.errno
        ) from exc
    listener.setblocking(False)
    return listener


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bound address) is a loopback address."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return host.lower() == "localhost"
