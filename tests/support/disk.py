"""A full disk, for real: a child process whose writes fail past a size.

``RLIMIT_FSIZE`` makes ``write(2)`` fail with ``EFBIG`` once a file would pass
the limit (SIGXFSZ ignored, so the process gets the error instead of dying):
the write policy is tested against a real failing write, not a patched one.
"""

from __future__ import annotations

import resource
import signal


def limit_file_size(limit: int):
    """A ``preexec_fn`` for ``subprocess.run``: files in the child stop at ``limit`` bytes."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply
