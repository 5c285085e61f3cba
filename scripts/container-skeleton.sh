#!/usr/bin/env bash
# Skeleton image build (docs/containers.md, docs/performance.md; not part of
# `make test`): the Containerfile `torchmpi container` writes, with the torch
# root swapped for a small package (py-six), built here with podman.  Proves
# the stages, the copies, the pins and activate.sh without hours of compiling.
#
# No registry is reachable here, so the base image is a Debian 12 minbase made
# with debootstrap (apt-get install debootstrap) and imported once into the
# project's podman store (the same settings as the tests).  PyPI and Spack's
# downloads go through this host's CA bundle, mounted at another path so the
# image's own ca-certificates stays intact.
#   usage: scripts/container-skeleton.sh [DIR]     (default: a new temporary directory)
set -euo pipefail
TORCHMPI_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$TORCHMPI_ROOT/scripts/paths.sh"
py="$TORCHMPI_ROOT/.venv/bin/python"
dir=${1:-$(mktemp -d)}
store="$TORCHMPI_CACHE/podman"
mkdir -p "$store"
printf '[storage]\ndriver = "overlay"\ngraphroot = "%s"\nrunroot = "%s"\n' \
  "$store/graph" "$store/run" > "$store/storage.conf"
export CONTAINERS_CONF="$TORCHMPI_ROOT/scripts/podman/containers.conf"
export CONTAINERS_STORAGE_CONF="$store/storage.conf"

base=localhost/torchmpi-base:debian12-minbase-python3
if ! podman image exists "$base"; then
  rootfs="$store/debian12-rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include=python3 bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
  tar -C "$rootfs" -c . | podman import - "$base" >/dev/null
  rm -rf "$rootfs"
fi

# The local site, its container built on that base, rendered by the tool.
site="$dir/site/local.yaml"
mkdir -p "$dir/site"
"$py" - "$TORCHMPI_ROOT/sites/local.yaml" "$site" "$base" <<'PY'
import sys, yaml
data = yaml.safe_load(open(sys.argv[1]))
data["container"] = {"runtime": "podman", "os": "debian12", "base": sys.argv[3],
                     "final": sys.argv[3]}
yaml.safe_dump(data, open(sys.argv[2], "w"), sort_keys=False)
PY
"$TORCHMPI_ROOT/.venv/bin/torchmpi" container "$site" -o "$dir/image" --force
# Swap the torch root for py-six (sources from files.pythonhosted.org); Python
# is the base image's (python.org, where Spack would fetch it, is unreachable).
"$py" - "$dir/image/spack.yaml" <<'PY'
import sys, yaml
path = sys.argv[1]
data = yaml.safe_load(open(path))
target = data["spack"]["specs"][0].rsplit("target=", 1)[1]
data["spack"]["specs"] = [f"py-six target={target}"]
data["spack"].pop("develop")
data["spack"]["packages"]["python:"] = {
    "buildable": False, "externals": [{"spec": "python@3.11.2", "prefix": "/usr"}]}
yaml.safe_dump(data, open(path, "w"), sort_keys=False)
PY
"$TORCHMPI_ROOT/scripts/container-context.sh" "$dir/image"
start=$(date +%s)
podman build --network=host -t torchmpi-skeleton:0.1.0 \
  -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro \
  --env PIP_CERT=/run/host-ca.crt --env SSL_CERT_FILE=/run/host-ca.crt \
  -f "$dir/image/Containerfile" "$dir/image"
echo "skeleton build: $(( $(date +%s) - start )) s"
podman run --rm torchmpi-skeleton:0.1.0 python -c 'import six; print("six", six.__version__)'
podman image inspect torchmpi-skeleton:0.1.0 --format '{{json .Labels}}'
