#!/usr/bin/env bash
# Runs the README's two commands in a bare Debian 12 (debootstrap --variant=minbase: no compiler, no
# CMake, no python3, no node, no mpirun), as a new user's machine has them, and times each.
#
#   sudo bash scripts/test-bare-debian.sh [ROOTFS]     (default ROOTFS: /var/tmp/remat-bookworm)
#
# Needs root (chroot, mounts) and Debian's debootstrap (apt-get install debootstrap). Makes ROOTFS
# once (about a minute; it is kept and reused, delete it to start afresh), clones this checkout's
# HEAD into ROOTFS/root/remat, and runs there, as root:
#   bash scripts/run.sh     (the main job; its setup installs g++, CMake and the libraries)
#   bash scripts/test.sh    (every test; those that need python3, torch, node or mpirun must skip)
# The project's ../shared folder is not there, so the tests that read it skip too.
# Set MIRROR to use another Debian mirror. The mounts are undone on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:-/var/tmp/remat-bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}
if [ "$(id -u)" -ne 0 ]; then
  echo "test-bare-debian: needs root (chroot and mounts): sudo bash $0 $*" >&2
  exit 2
fi
if ! command -v debootstrap >/dev/null; then
  echo "test-bare-debian: debootstrap is missing: apt-get install debootstrap" >&2
  exit 2
fi
if [ ! -x "$root/usr/bin/apt-get" ]; then
  echo "test-bare-debian: making a minimal Debian 12 in $root" >&2
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
fi
for tool in g++ cmake python3 node mpirun; do
  if [ -e "$root/usr/bin/$tool" ]; then echo "test-bare-debian: note: $root already has $tool (not bare)" >&2; fi
done
cp /etc/resolv.conf "$root/etc/resolv.conf"
rm -rf "$root/root/remat"
git clone -q "$PWD" "$root/root/remat"
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for m in proc sys dev dev/pts; do
  mkdir -p "$root/$m"
  case $m in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount -t sysfs sys "$root/sys" ;;
    dev) mount --bind /dev "$root/dev" ;;
    dev/pts) mount -t devpts devpts "$root/dev/pts" ;;
  esac
  mounted+=("$root/$m")
done
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            TERM=dumb bash -c "cd /root/remat && $1"; }
for cmd in "bash scripts/run.sh" "bash scripts/test.sh"; do
  echo "test-bare-debian: $cmd" >&2
  start=$(date +%s)
  status=0
  in_root "$cmd" || status=$?
  echo "test-bare-debian: $cmd: exit $status after $(($(date +%s) - start)) s" >&2
  [ "$status" -eq 0 ] || exit "$status"
done
echo "test-bare-debian: both README commands passed in a bare Debian 12" >&2
