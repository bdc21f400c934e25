#!/usr/bin/env bash
# Installs every Debian 12 package Tandem's build, tests and demo need. Idempotent: packages
# already present are skipped, so a second run makes no change and needs no network.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libucx-dev ucx-utils
  libabsl-dev
  libgtest-dev libgmock-dev
  libdnnl-dev libopenblas-dev
  libcurl4-openssl-dev nlohmann-json3-dev
  prometheus-cpp-dev
  libevent-dev libhttp-parser-dev libcivetweb-dev libcpp-httplib-dev curl
  libssl-dev openssl
  python3 python3-pip python3-venv python3-yaml python3-jinja2 unzip
  iproute2 procps
  clang-format
  prometheus
  clang-14 libclang-rt-14-dev libomp-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
