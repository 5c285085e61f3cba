"""Hand-built doctor inputs shared by the doctor's test modules.

What :func:`torchmpi.doctor.nccl.resolve_plugin` would report on a node, built
without loading anything, so the NCCL-plugin rules can be driven per case.
"""

from __future__ import annotations

from torchmpi.doctor import nccl


def mapped_at(lib_dir: str, *libs: str) -> dict:
    """What loading each plugin library from ``lib_dir`` maps (as :func:`nccl.resolve_plugin`
    reports it): the library itself and a libfabric; a library not in ``libs`` is absent."""
    fabric = "/opt/cray/libfabric/1.22.0/lib64/libfabric.so.1"
    return {name: (nccl.Mapped(name, [f"{lib_dir}/{name}", fabric]) if name in libs else
                   nccl.Mapped(name, error=f"{name}: cannot open shared object file: "
                                           "No such file or directory"))
            for name in dict.fromkeys(("libnccl-net.so", "libnccl-net-ofi.so", *libs))}
