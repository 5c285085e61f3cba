"""doctor `site.prefix`: torch, mpi4py and NCCL must come from the site's install tree.

The checkout venv's torch is a PyPI wheel, which is exactly what the check is for:
run for real against a site whose install tree is elsewhere it must FAIL and name
torch's file; with the install tree where that torch is, it must PASS.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from support.cli_run import doctor_in_process
from support.host_tools import local_data
from torchmpi.doctor.core import FAIL, PASS, SKIP
from torchmpi.doctor.origin import check_site_prefix, install_root


def site_with_root(tmp_path: Path, root: str) -> Path:
    data = local_data()
    data["install"] = {"root": root}
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def doctor_site_prefix(capsys, site: str) -> dict:
    """site.prefix of the real doctor on this checkout's torch, run in-process
    (support.cli_run): the claim is the report's verdict, not the process."""
    _, out = doctor_in_process(capsys, "--json", "--no-probe", "--site", site)
    return next(c for c in json.loads(out)["checks"] if c["name"] == "site.prefix")


def test_a_pip_torch_outside_the_site_tree_fails(tmp_path, capsys):
    check = doctor_site_prefix(capsys,
                               str(site_with_root(tmp_path, str(tmp_path / "site-install"))))
    assert check["status"] == FAIL, check
    import torch

    assert f"torch from {torch.__file__}" in check["detail"]
    assert "torchmpi venv" in check["fix"]


def test_torch_inside_the_site_tree_passes(tmp_path, capsys):
    check = doctor_site_prefix(capsys, str(site_with_root(tmp_path, sys.prefix)))
    assert check["status"] == PASS, check


WHEEL_NCCL = {"torch": "/sw/torch/__init__.py",
              "libnccl": "/home/u/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"}


def test_without_a_site_there_is_nothing_to_replace():
    """No --site, pip torch + pip NCCL: a coherent stack, not 'a pip install
    replaced the site's package'."""
    check = check_site_prefix(WHEEL_NCCL, None, {})
    assert check.status == SKIP and check.detail.startswith("no site given")
    assert check_site_prefix({"torch": "/x/torch/__init__.py"}, None, {}).status == SKIP
    assert check_site_prefix({}, None, {}).status == SKIP


def test_nccl_from_the_pip_wheel_fails_under_a_site_without_install_root():
    check = check_site_prefix(WHEEL_NCCL, {"name": "generic-ib"}, {})
    assert check.status == FAIL and "libnccl from a pip wheel" in check.detail


def test_a_site_without_install_root_says_so_not_give_site():
    """--site was given; what is missing is the site's install.root."""
    check = check_site_prefix({"torch": "/x/torch/__init__.py"}, {"name": "generic-ib"}, {})
    assert check.status == SKIP and "give --site" not in check.detail
    assert "site generic-ib states no install.root" in check.detail


def test_a_site_without_install_root_on_the_command_line(capsys):
    check = doctor_site_prefix(capsys, "generic-ib")
    assert check["status"] == SKIP and "give --site" not in check["detail"], check
    assert "generic-ib states no install.root" in check["detail"]


def test_in_a_torchmpi_image_torch_is_the_images():
    site = {"name": "perlmutter", "install": {"root": "/pscratch/tm/install"}}
    image = {"torch": "/opt/view/lib/python3.11/site-packages/torch/__init__.py"}
    check = check_site_prefix(image, site, {"TORCHMPI_CONTAINER": "podman-hpc"})
    assert check.status == SKIP and "container.*" in check.detail
    assert check_site_prefix(image, site, {}).status == FAIL


@pytest.mark.parametrize(("root", "env", "want"), [
    ("/glade/work/$user/tm/install", {"USER": "ann"}, "/glade/work/ann/tm/install"),
    ("$PSCRATCH/tm", {"PSCRATCH": "/pscratch/sd/a/ann"}, "/pscratch/sd/a/ann/tm"),
])
def test_install_root_expands_like_spack(root, env, want):
    assert install_root({"install": {"root": root}}, env) == want


def test_mpi4py_outside_the_tree_is_named():
    found = {"torch": "/glade/work/ann/tm/install/py-torch/torch/__init__.py",
             "mpi4py": "/home/ann/.local/lib/python3.10/site-packages/mpi4py/__init__.py"}
    check = check_site_prefix(found, {"install": {"root": "/glade/work/$user/tm/install"}},
                              {"USER": "ann"}, tree="/glade/work/ann/tm/install")
    assert check.status == FAIL and "mpi4py from /home/ann/.local" in check.detail
    assert "torch from" not in check.detail


def test_a_sibling_tree_with_the_same_prefix_is_outside():
    """The tree of an older install beside the site's (install-2025 next to install) is
    not the site's: the root must match whole path components, not a string prefix."""
    site = {"install": {"root": "/glade/work/$user/tm/install"}}
    old = {"torch": "/glade/work/ann/tm/install-2025/py-torch/torch/__init__.py"}
    check = check_site_prefix(old, site, {"USER": "ann"}, tree="/glade/work/ann/tm/install")
    assert check.status == FAIL and "torch from /glade/work/ann/tm/install-2025" in check.detail
    new = {"torch": "/glade/work/ann/tm/install/py-torch/torch/__init__.py"}
    assert check_site_prefix(new, site, {"USER": "ann"},
                             tree="/glade/work/ann/tm/install").status == PASS


def test_an_install_root_with_a_variable_unset_here_is_not_compared():
    """Perlmutter's root is under $PSCRATCH: where that is unset, there is no tree to
    compare with (not 'the site installs under $PSCRATCH/...')."""
    site = {"name": "perlmutter", "install": {"root": "$PSCRATCH/torchmpi/install"}}
    check = check_site_prefix({"torch": "/x/torch/__init__.py"}, site, {})
    assert check.status == SKIP and "names $PSCRATCH" in check.detail, check
    # Set here it is still the caller's, not the installer's: the
    # recorded install tree is compared with instead (tests/test_doctor_site.py).
    set_here = check_site_prefix({"torch": "/x/torch/__init__.py"}, site, {"PSCRATCH": "/p"})
    assert set_here.status == SKIP


def test_the_install_tree_is_found_above_the_tools_own_folder(tmp_path: Path) -> None:
    """Spack's database two folders above a file (as ``lib/python3.x/site-packages``
    sits under a prefix of the tree): that tree; with none anywhere above, None."""
    from torchmpi.doctor.origin import SPACK_DB, recorded_tree

    (tmp_path / "tree" / SPACK_DB).mkdir(parents=True)
    module = tmp_path / "tree" / "prefix" / "lib" / "torchmpi" / "doctor.py"
    module.parent.mkdir(parents=True)
    module.write_text("")
    assert recorded_tree(str(module)) == str(tmp_path / "tree")
    alone = tmp_path / "elsewhere" / "x.py"
    alone.parent.mkdir()
    alone.write_text("")
    assert recorded_tree(str(alone)) is None
