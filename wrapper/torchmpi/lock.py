"""Read a concretized environment (``spack.lock``) without importing Spack.

The lock is plain JSON; reading it directly keeps ``torchmpi concretize``'s
summary and the DAG checks in the tests independent of Spack's Python API.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Package names that can provide ``mpi`` in the environments we render.
MPI_NAMES = ("cray-mpich", "openmpi-cuda", "openmpi", "mpich", "mvapich")


def root_name(spec: str) -> str:
    """The package name of a root spec string (``ns.pkg@1 +v`` -> ``pkg``)."""
    head = re.split(r"[\s@%^+~]", spec.strip(), maxsplit=1)[0]
    return head.rsplit(".", 1)[-1]


@dataclass
class Node:
    hash: str
    name: str
    version: str
    namespace: str
    target: str
    os: str
    variants: dict[str, Any]
    external: bool
    external_path: str | None
    deps: list[tuple[str, str, list[str]]]  # (name, hash, virtuals)

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


class Lock:
    """The concrete DAG of one environment."""

    def __init__(self, path: Path):
        self.path = path
        data = json.loads(path.read_text())
        self.nodes: dict[str, Node] = {}
        for h, spec in data.get("concrete_specs", {}).items():
            arch = spec.get("arch") or {}
            target = arch.get("target")
            if isinstance(target, dict):
                target = target.get("name")
            deps = [
                (d["name"], d["hash"], list((d.get("parameters") or {}).get("virtuals") or []))
                for d in spec.get("dependencies", [])
            ]
            self.nodes[h] = Node(
                hash=h,
                name=spec["name"],
                version=str(spec.get("version", "?")),
                namespace=spec.get("namespace", ""),
                target=str(target or ""),
                os=str(arch.get("platform_os") or ""),
                variants=spec.get("parameters") or {},
                external=bool(spec.get("external")),
                external_path=(spec.get("external") or {}).get("path"),
                deps=deps,
            )
        self.root_hashes = [r["hash"] for r in data.get("roots", [])]
        self.root_specs = [r.get("spec", "") for r in data.get("roots", [])]

    def root_mismatches(self) -> list[str]:
        """Roots whose hash names a spec of another package, as messages.

        Spack 1.1's concretization cache was seen to write a two-root lock with
        each root paired to the other's hash; a lock like that installs the
        wrong thing under the right name.  Empty when every root is sound.
        """
        problems = []
        for text, h in zip(self.root_specs, self.root_hashes):
            wanted = root_name(text)
            node = self.nodes.get(h)
            if node is None:
                problems.append(f"root '{text}' points at hash {h}, which is not in the lock")
            elif node.name != wanted:
                problems.append(f"root '{text}' points at {node.label} (hash {h})")
        return problems

    def named(self, name: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.name == name]

    @property
    def roots(self) -> list[Node]:
        return [self.nodes[h] for h in self.root_hashes if h in self.nodes]

    @property
    def externals(self) -> list[Node]:
        return sorted((n for n in self.nodes.values() if n.external), key=lambda n: n.name)

    @property
    def to_build(self) -> list[Node]:
        return [n for n in self.nodes.values() if not n.external]

    def mpi(self) -> list[Node]:
        """Nodes that some dependent uses as its ``mpi``."""
        hashes = {h for n in self.nodes.values() for _, h, v in n.deps if "mpi" in v}
        return [self.nodes[h] for h in sorted(hashes) if h in self.nodes]

    def versions(self, name: str) -> str:
        found = self.named(name)
        if not found:
            return "-"
        return ", ".join(sorted(n.label + (" (external)" if n.external else "") for n in found))

    def summary(self) -> dict[str, Any]:
        mpi = self.mpi()
        return {
            "roots": [f"{n.label} ({n.namespace})" for n in self.roots],
            "nodes": len(self.nodes),
            "to_build": len(self.to_build),
            "externals": [n.label for n in self.externals],
            "mpi": ", ".join(n.label + (" (external)" if n.external else "") for n in mpi) or "-",
            "nccl": self.versions("nccl"),
            "rccl": self.versions("rccl"),  # an AMD site's (torch's "nccl" backend there)
            "plugin": self.versions("aws-ofi-nccl"),
            "torch": self.versions("py-torch"),
            "targets": sorted({n.target for n in self.nodes.values() if not n.external}),
        }
