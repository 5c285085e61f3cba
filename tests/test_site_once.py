"""The answers every output shares are asked of the Site, computed once per site.

The resolved runtime variables feed runtime.sh, spack.yaml's env_vars,
modules.yaml, the container descriptors and ReFrame's settings: each output once
resolved them again (2 to 5 times per output), and the MPI spec was spelled in
three places.  Here one loaded site renders its environment, its container and
its ReFrame configuration with :func:`torchmpi.runtime.resolve` entered once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torchmpi import container, reframe, render, runtime
from torchmpi import site as sitemod


@pytest.mark.parametrize("name", ["derecho", "perlmutter", "alps-gh200"])
def test_every_output_of_a_site_resolves_its_runtime_once(name: str, tmp_path: Path,
                                                          monkeypatch) -> None:
    calls = []
    real = runtime.resolve

    def counted(data):
        calls.append(1)
        return real(data)

    monkeypatch.setattr(runtime, "resolve", counted)
    site = sitemod.load(name)
    calls.clear()  # the load-time rules read the values of the raw data, before a Site
    render.render(site, tmp_path / "env")
    container.render(site)
    reframe.build(site, tmp_path / "rfm", env_from="runtime-sh")
    assert len(calls) == 1, len(calls)
    assert site.environment == dict(real(site.data).set)


def test_the_mpi_spec_and_module_are_the_sites_answers() -> None:
    from torchmpi import spackenv

    site = sitemod.load("derecho")
    assert site.mpi_spec == "cray-mpich@8.1.27" and site.mpi_module == "cray-mpich/8.1.27"
    packages = spackenv.packages_yaml(site)[1]["packages"]
    assert packages["mpi"]["require"] == [site.mpi_spec]
    assert site.summary().split(", ")[2] == site.mpi_spec
