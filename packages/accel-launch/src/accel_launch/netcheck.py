"""Network set-up checks of a multi-machine launch, before anything starts.

gloo and NCCL tell the other machines this machine's address as they find it: by default
the address its hostname resolves to. Where that is a loopback address (Debian and many
images map the hostname to 127.0.1.1 in /etc/hosts), the other machines are told to
connect to themselves, and the job hangs or fails in ``init_process_group`` with nothing
pointing at the cause. ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` name the interface
to use instead; this module finds the one that reaches machine 0, to name it.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys
from collections.abc import Callable, Mapping

__all__ = ["address_to_advertise", "interface_towards", "loopback_hostname_warning"]

_SIOCGIFADDR = 0x8915


def _addresses_of(name: str) -> list[str]:
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(name, None)})
    except OSError:
        return []


def _interface_address(name: str) -> str | None:
    """The IPv4 address of interface ``name`` (Linux ioctl), None when it has none."""
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR,
                                 struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def interface_towards(host: str) -> tuple[str | None, str | None]:
    """(this machine's address towards ``host``, the interface holding it), as far as found
    (no packet is sent: a UDP socket is only connected)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((host, 9))
            local = str(sock.getsockname()[0])
    except OSError:
        return None, None
    if not sys.platform.startswith("linux"):
        return local, None
    for _, name in socket.if_nameindex():
        if _interface_address(name) == local:
            return local, name
    return local, None


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def loopback_hostname_warning(
        main_ip: str, environ: Mapping[str, str], *, hostname: str | None = None,
        resolve: Callable[[str], list[str]] = _addresses_of,
        towards: Callable[[str], tuple[str | None, str | None]] = interface_towards,
) -> str | None:
    """A warning when this machine's hostname resolves to loopback and neither
    ``GLOO_SOCKET_IFNAME`` nor ``NCCL_SOCKET_IFNAME`` says which interface to use."""
    if environ.get("GLOO_SOCKET_IFNAME") or environ.get("NCCL_SOCKET_IFNAME"):
        return None
    if any(_is_loopback(a) for a in resolve(main_ip)):
        return None  # every "machine" is this one: loopback is what reaches them
    name = hostname if hostname is not None else socket.gethostname()
    loopback = [a for a in resolve(name) if _is_loopback(a)]
    if not loopback:
        return None
    local, interface = towards(main_ip)
    if interface:
        fix = (f"set GLOO_SOCKET_IFNAME={interface} (CPU, gloo) and NCCL_SOCKET_IFNAME="
               f"{interface} (GPUs) in this machine's environment: {interface} holds "
               f"{local}, the address that reaches machine 0 at {main_ip}")
    else:
        fix = ("set GLOO_SOCKET_IFNAME (CPU, gloo) and NCCL_SOCKET_IFNAME (GPUs) to the "
               f"interface that reaches machine 0 at {main_ip} (see `ip route get {main_ip}`)")
    return (f"this machine's hostname {name!r} resolves to {', '.join(loopback)} (loopback): "
            "gloo and NCCL would give the other machines that address, and the job would "
            f"hang or fail to connect. {fix[0].upper()}{fix[1:]}, or map the hostname to "
            "that address in /etc/hosts.")


def address_to_advertise(main_ip: str, *, hostname: str | None = None,
                         resolve: Callable[[str], list[str]] = _addresses_of,
                         towards: Callable[[str], tuple[str | None, str | None]]
                         = interface_towards) -> str | None:
    """The address the c10d rendezvous should publish for this machine (torch's
    ``local_addr``) where its default, the hostname, resolves to loopback while machine 0
    is elsewhere: this machine's address towards ``main_ip``. None: keep torch's default."""
    if any(_is_loopback(a) for a in resolve(main_ip)):
        return None
    name = hostname if hostname is not None else socket.gethostname()
    if not any(_is_loopback(a) for a in resolve(name)):
        return None
    return towards(main_ip)[0]
