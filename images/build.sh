#!/usr/bin/env bash
# Build the pagedock images on a machine with buildah and no Docker engine (`make images`).
#
#   images/build.sh [TARGET...]     default: engine-cpu router operator
#
# Each TARGET of the Dockerfile becomes localhost/pagedock/TARGET:$TAG. Base images are not
# pulled: a Debian bookworm root made by debootstrap (Debian's python3) is imported once as
# $BASE_IMAGE and passed as PYTHON_IMAGE; later builds reuse it. pip inside the build sees this
# machine's pip configuration (CA bundle, find-links, extra indexes, constraints), mounted
# read-only at the same paths, so torch's CPU wheel comes from where `make` gets it.
set -euo pipefail

cd "$(dirname "$0")/.."
TAG=${TAG:-dev}
BASE_IMAGE=${BASE_IMAGE:-localhost/pagedock/base-bookworm:latest}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What pip reads here (`pip config debug` lists the files); those that exist are mounted.
PIP_PATHS=${PIP_PATHS:-/etc/pip.conf /etc/xdg/pip /root/.config/pip /etc/ssl/certs/ca-certificates.crt /opt/wheels /opt/pypi /opt/pypi-more}
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(engine-cpu router operator)

install_tools() {
    command -v buildah >/dev/null && command -v debootstrap >/dev/null && return
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah debootstrap
}

make_base() {
    buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1 && return
    echo "images: making $BASE_IMAGE with debootstrap (once)"
    local rootfs ctr
    rootfs=$(mktemp -d /var/tmp/pagedock-base.XXXXXX)
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" "$DEBIAN_MIRROR"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    ctr=$(buildah from scratch)
    cp -a "$rootfs"/. "$(buildah mount "$ctr")"/
    buildah umount "$ctr" >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env LANG=C.UTF-8 --cmd /bin/bash "$ctr"
    buildah commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
    rm -rf "$rootfs"
}

build_target() {
    local target=$1 mounts=() path
    for path in $PIP_PATHS; do
        [ -e "$path" ] && mounts+=(--volume "$path:$path:ro")
    done
    echo "images: building localhost/pagedock/$target:$TAG"
    # TORCH_CPU_INDEX_URL empty: the CPU wheel is found through the mounted pip configuration.
    # docker format: OCI images drop HEALTHCHECK.
    buildah bud --isolation chroot --layers --pull=never --format docker "${mounts[@]}" \
        --build-arg PYTHON_IMAGE="$BASE_IMAGE" --build-arg TORCH_CPU_INDEX_URL= \
        --target "$target" --tag "localhost/pagedock/$target:$TAG" --file Dockerfile .
}

install_tools
make_base
for target in "${TARGETS[@]}"; do
    build_target "$target"
done
buildah images --filter reference="localhost/pagedock/*:$TAG"
