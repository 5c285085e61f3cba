"""Hand-built doctor inputs shared by the doctor's test modules.

What :func:`torchmpi.doctor.nccl.resolve_plugin` would report on a node, built
without loading anything, so the NCCL-plugin rules can be driven per case.
"""

from __future__ import annotations

from collections.abc import Mapping

from torchmpi.doctor import nccl


def mapped_at(lib_dir: str, *libs: str, env: Mapping[str, str] | None = None) -> dict:
    """What loading each plugin library from ``lib_dir`` maps (as :func:`nccl.resolve_plugin`
    reports it for ``env``): the library itself and a libfabric; a library not in ``libs``
    is absent.  A name NCCL does not open with ``env`` (libnccl-net-ofi.so while
    NCCL_NET_PLUGIN is unset) is marked so, as the resolver marks it.

    An install as aws-ofi-nccl >= 1.15 makes it ships both libnccl-net.so and
    libnccl-net-ofi.so, or libnccl-net-ofi.so alone when configured
    --disable-nccl-net-library (src/Makefile.am at v1.19.2): pass the names it has."""
    env = env or {}
    opened = nccl.plugin_names(env)
    fabric = "/opt/cray/libfabric/1.22.0/lib64/libfabric.so.1"
    names = dict.fromkeys((*opened, *nccl.alternatives(env), *libs))
    return {name: (nccl.Mapped(name, [f"{lib_dir}/{name}", fabric], opened=name in opened)
                   if name in libs else
                   nccl.Mapped(name, error=f"{name}: cannot open shared object file: "
                                           "No such file or directory",
                               opened=name in opened))
            for name in names}
