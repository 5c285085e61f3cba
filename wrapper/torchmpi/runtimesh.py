"""runtime.sh as text: one ``export`` per runtime variable of the site, sources in comments.

The one file two verbs write: ``torchmpi render`` into the environment, and
``torchmpi reframe --env runtime-sh`` beside the ReFrame configuration, which
sources it in every job.  Both take it from here, so the two are the same
lines; each verb's header comes from the writer (:mod:`torchmpi.output`).
"""

from __future__ import annotations

from torchmpi import runtime
from torchmpi.site import Site
from torchmpi.yamltext import comment

NAME = "runtime.sh"


def body(site: Site) -> str:
    """runtime.sh: one ``export`` per variable of :func:`torchmpi.runtime.resolve`."""
    rt = site.runtime
    lines = [(f"Runtime variables for jobs on '{site.name}'"
              f" (launcher: {site.data['launcher']}, fabric: {site.data['fabric']})."),
             "Source this file in the job script; it changes nothing at build time."]
    if not rt:
        return comment(*lines, "No runtime variables for this site.")
    lines += [f"{what}: {source}" for what, source in rt.sources if source]
    return comment(*lines) + "".join(line + "\n" for line in runtime.shell_lines(rt))
