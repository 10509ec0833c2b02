#!/usr/bin/env bash
# Installs what remat builds with, from Debian 12's packages. Uses sudo when not root.
#
# --references: also the independent implementations the reference tests compare remat with: PyTorch
# (LlamaPeer: loss and every gradient against a float64 LLaMA), SentencePiece (SentencePieceReference),
# Chromium (SvgChromium renders the pictures), and Node.js with npm (Gpt2Reference and Llama3Reference
# install their npm packages on first use). Without them those tests skip, naming the package; CI
# installs them and then requires them (REMAT_REQUIRE_TOOLS=1 in .ci/run).
set -euo pipefail
# ocl-icd-opencl-dev: Debian's oneDNN is built with the OpenCL GPU runtime, so its CMake config
# requires OpenCL (only a Recommends of libdnnl-dev, and recommends are not installed here).
pkgs=(g++ cmake ninja-build make libdnnl-dev ocl-icd-opencl-dev libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
      nlohmann-json3-dev libxxhash-dev libsentencepiece-dev libopenmpi-dev openmpi-bin)
if [ "${1:-}" = "--references" ]; then
  pkgs+=(python3 python3-torch python3-sentencepiece chromium)
  # Node.js and npm: any install will do (a machine may have them from elsewhere; Debian's npm package
  # conflicts with other builds of nodejs, so only a machine with neither gets Debian's).
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then pkgs+=(nodejs npm); fi
elif [ $# -gt 0 ]; then
  echo "setup.sh: unknown argument '$1' (the only one is --references)" >&2
  exit 2
fi
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
