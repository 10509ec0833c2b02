#!/usr/bin/env bash
# Installs what remat builds with, from Debian 12's packages. Uses sudo when not root.
set -euo pipefail
# ocl-icd-opencl-dev: Debian's oneDNN is built with the OpenCL GPU runtime, so its CMake config
# requires OpenCL (only a Recommends of libdnnl-dev, and recommends are not installed here).
pkgs=(g++ cmake ninja-build make libdnnl-dev ocl-icd-opencl-dev libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
      nlohmann-json3-dev libxxhash-dev libsentencepiece-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
