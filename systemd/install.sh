#!/usr/bin/env bash
# Install the Realtime-Venus daemon as a systemd service on a Debian / Ubuntu / JetPack
# machine, from a checkout. Run as root: sudo systemd/install.sh [OPTIONS]
# `systemd/install.sh --help` says what it does. Running it again is safe: it upgrades
# /opt/venus from the checkout and never overwrites /etc/venus/venus.toml.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
# What the daemon needs from the system: a venv, PortAudio (sounddevice), libspeexdsp
# (echo cancellation), ALSA plugins, and the tools README and `venus doctor` point at.
APT_PACKAGES=(python3-venv libportaudio2 libspeexdsp1 libasound2-plugins alsa-utils
              v4l-utils ca-certificates)
USER_NAME=venus
DEVICE_GROUPS=(audio video render)

usage() {
  cat <<'EOF'
Usage: sudo systemd/install.sh [OPTIONS]

Installs the Realtime-Venus daemon from this checkout:
  - system packages with apt (python3-venv, libportaudio2, libspeexdsp1, ...);
  - the system user `venus` (groups audio, video, render);
  - /etc/venus (0750 root:venus) with venus.toml from systemd/venus.toml, only if there
    is none: an existing configuration is never overwritten;
  - /var/lib/venus and /var/cache/venus (0750 venus:venus);
  - a virtual environment /opt/venus with the daemon (no torch);
  - the units venus.service and venus-worker@.service in /etc/systemd/system and the
    desktop unit venus.service in /etc/systemd/user; then `systemctl daemon-reload`
    and `systemctl enable venus` (it is not started: export the engines first).

Options:
  --with-export           also install the export tools (the [export] extra: torch),
                          to run `venus export` on this device
  --system-site-packages  let /opt/venus see the system's Python packages (on a Jetson:
                          JetPack's OpenCV with GStreamer, for gst: camera sources)
  --no-apt                do not install system packages
  --no-enable             do not enable venus.service (e.g. on a desktop, where you
                          use the user unit instead)
  --root DIR              install into DIR as if it were / (for tests and images): no
                          apt, no systemctl; the user is created only if DIR/etc/passwd
                          exists (useradd --prefix)
  --uninstall             stop, disable and remove the units and /opt/venus; keep
                          /etc/venus, /var/lib/venus (journal, engines), /var/cache/venus
  --purge                 like --uninstall, and also remove those three directories
  -h, --help              show this help

Environment: PYTHON (default python3, >= 3.10) makes the virtual environment.
EOF
}

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
note() { printf 'note: %s\n' "$*" >&2; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

ARGS="$*"
ROOT=""
APT=1
ENABLE=1
EXPORT=0
SYSTEM_SITE=0
MODE=install
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --with-export) EXPORT=1 ;;
    --system-site-packages) SYSTEM_SITE=1 ;;
    --no-apt) APT=0 ;;
    --no-enable) ENABLE=0 ;;
    --root)
      [ $# -ge 2 ] && [ -n "$2" ] || die "--root needs a directory (--root DIR)"
      ROOT=$2; shift ;;
    --root=*) ROOT=${1#--root=}; [ -n "$ROOT" ] || die "--root needs a directory" ;;
    --uninstall) MODE=uninstall ;;
    --purge) MODE=purge ;;
    *) printf 'install.sh: unknown option %q; see systemd/install.sh --help\n' "$1" >&2; exit 2 ;;
  esac
  shift
done

if [ -n "$ROOT" ]; then
  [ -d "$ROOT" ] || die "--root $ROOT: no such directory"
  ROOT=$(cd "$ROOT" && pwd)
  [ "$ROOT" != / ] || ROOT=""
fi
if [ -z "$ROOT" ] && [ "$(id -u)" -ne 0 ]; then
  die "run as root: sudo $0 $ARGS"
fi

PREFIX=$ROOT/opt/venus
ETC=$ROOT/etc/venus
STATE=$ROOT/var/lib/venus
CACHE=$ROOT/var/cache/venus
UNITS=$ROOT/etc/systemd/system
USER_UNITS=$ROOT/etc/systemd/user

# systemctl only for the running system, and only when systemd is PID 1 (sd_booted).
systemd_running() { [ -z "$ROOT" ] && [ -d /run/systemd/system ]; }

# ---------------------------------------------------------------- the user and groups

USER_UID=""  # numeric ids of venus in the target's passwd; empty: not there
USER_GID=""

lookup_user() {
  local passwd=$ROOT/etc/passwd
  [ -f "$passwd" ] || return 0
  USER_UID=$(awk -F: -v u="$USER_NAME" '$1 == u { print $3 }' "$passwd")
  USER_GID=$(awk -F: -v u="$USER_NAME" '$1 == u { print $4 }' "$passwd")
}

has_group() { [ -f "$ROOT/etc/group" ] && grep -q "^$1:" "$ROOT/etc/group"; }

create_user() {
  if [ -n "$ROOT" ] && { [ ! -f "$ROOT/etc/passwd" ] || [ "$(id -u)" -ne 0 ]; }; then
    note "not creating the user $USER_NAME in $ROOT (that needs root and $ROOT/etc/passwd); the unit's User=$USER_NAME must exist on the target"
    return 0
  fi
  local prefix=()
  [ -z "$ROOT" ] || prefix=(--prefix "$ROOT")
  lookup_user
  if [ -z "$USER_UID" ]; then
    say "creating the system user $USER_NAME"
    useradd "${prefix[@]}" --system --user-group --home-dir /var/lib/venus --no-create-home \
      --shell /usr/sbin/nologin --comment "Realtime-Venus daemon" "$USER_NAME"
    lookup_user
  fi
  # The unit's SupplementaryGroups= fails to start the service if a group is missing;
  # render in particular is absent on minimal images (udev gives it /dev/dri/renderD*).
  local group joined=()
  for group in "${DEVICE_GROUPS[@]}"; do
    has_group "$group" || groupadd "${prefix[@]}" --system "$group"
    joined+=("$group")
  done
  usermod "${prefix[@]}" --append --groups "$(IFS=,; echo "${joined[*]}")" "$USER_NAME"
}

# chown only to a user that exists in the target, and only as root.
own() {  # own USER|root GROUP|venus PATH...
  local who=$1 grp=$2; shift 2
  [ "$(id -u)" -eq 0 ] && [ -n "$USER_UID" ] || return 0
  [ "$who" = venus ] && who=$USER_UID
  [ "$who" = root ] && who=0
  [ "$grp" = venus ] && grp=$USER_GID
  chown "$who:$grp" "$@"
}

# ---------------------------------------------------------------------------- install

install_system_packages() {
  if [ "$APT" -eq 0 ] || [ -n "$ROOT" ]; then
    return 0
  fi
  if ! command -v apt-get >/dev/null; then
    note "no apt-get: install these yourself: ${APT_PACKAGES[*]}"
    return 0
  fi
  local pkg missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing system packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

check_python() {
  command -v "$PYTHON" >/dev/null || die "$PYTHON not found; install python3 (>= 3.10) or set PYTHON"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "$("$PYTHON" --version 2>&1) is older than Python 3.10; set PYTHON=python3.10 (or newer)"
  "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null \
    || die "$PYTHON cannot make virtual environments; run: apt-get install python3-venv"
}

make_directories() {
  say "directories: $ETC, $STATE, $CACHE"
  install -d -m 0755 "$ROOT/etc" "$ROOT/var/lib" "$ROOT/var/cache" "$ROOT/opt"
  # The service reads /etc/venus as group venus; only root writes it. Workers' env
  # and credential files are read by systemd (root) alone.
  install -d -m 0750 "$ETC" "$ETC/workers"
  own root venus "$ETC"
  install -d -m 0750 "$STATE" "$CACHE"
  own venus venus "$STATE" "$CACHE"
}

install_config() {
  if [ -e "$ETC/venus.toml" ]; then
    say "keeping the existing $ETC/venus.toml (never overwritten; the example is $REPO/systemd/venus.toml)"
  else
    say "installing $ETC/venus.toml"
    install -m 0640 "$REPO/systemd/venus.toml" "$ETC/venus.toml"
    own root venus "$ETC/venus.toml"
  fi
  # Examples, refreshed on every run: they are read by nothing.
  install -m 0644 "$REPO/systemd/devices.example.toml" "$ETC/devices.example.toml"
  install -m 0644 "$REPO/systemd/worker.env.example" "$ETC/workers/worker.env.example"
}

install_venv() {
  check_python
  local site=()
  [ "$SYSTEM_SITE" -eq 0 ] || site=(--system-site-packages)
  if [ ! -x "$PREFIX/bin/python" ] || ! "$PREFIX/bin/python" -c '' 2>/dev/null; then
    say "creating the virtual environment $PREFIX ($("$PYTHON" --version 2>&1))"
    rm -rf "$PREFIX"
    "$PYTHON" -m venv "${site[@]}" "$PREFIX"
  elif [ "$SYSTEM_SITE" -eq 1 ] && ! grep -q '^include-system-site-packages = true' "$PREFIX/pyvenv.cfg"; then
    note "$PREFIX exists without system site packages; for --system-site-packages run --uninstall first"
  fi
  # Build from a copy of the tree, so that the checkout gets no root-owned build/.
  SRC_COPY=$(mktemp -d)
  trap 'rm -rf "$SRC_COPY"' EXIT
  tar -C "$REPO" --exclude='./.*' --exclude=./build --exclude='*.egg-info' \
      --exclude=__pycache__ --exclude=./out --exclude=./venus-demo -cf - . \
    | tar -C "$SRC_COPY" -xf -
  local target=$SRC_COPY
  [ "$EXPORT" -eq 0 ] || target="$SRC_COPY[export]"
  say "installing realtime-venus$([ "$EXPORT" -eq 0 ] || echo '[export]') into $PREFIX"
  "$PREFIX/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$REPO/constraints.txt" "$target"
  [ "$SYSTEM_SITE" -eq 0 ] || prefer_system_opencv
  "$PREFIX/bin/venus" --version >/dev/null
}

# The pip wheel opencv-python-headless (a dependency) has no GStreamer and, in the venv,
# shadows the system's cv2; with --system-site-packages the point is JetPack's OpenCV
# (gst: camera sources), so the wheel goes when the system one has GStreamer.
prefer_system_opencv() {
  local probe='import cv2, re, sys; sys.exit(not re.search(r"GStreamer:\s*YES", cv2.getBuildInformation()))'
  if "$PYTHON" -c "$probe" 2>/dev/null; then
    say "using the system OpenCV (with GStreamer) instead of opencv-python-headless"
    "$PREFIX/bin/python" -m pip uninstall --quiet --yes opencv-python-headless
  else
    note "$PYTHON has no OpenCV with GStreamer; keeping opencv-python-headless (no gst: camera sources)"
  fi
}

install_units() {
  say "installing the units into $UNITS and $USER_UNITS"
  install -d -m 0755 "$UNITS" "$USER_UNITS"
  install -m 0644 "$REPO/systemd/venus.service" "$REPO/systemd/venus-worker@.service" "$UNITS/"
  install -m 0644 "$REPO/systemd/user/venus.service" "$USER_UNITS/venus.service"
  if systemd_running; then
    systemctl daemon-reload
    if [ "$ENABLE" -eq 1 ]; then
      systemctl enable venus.service
    fi
  elif [ -z "$ROOT" ]; then
    note "systemd is not running here (not PID 1); once it is, run: systemctl daemon-reload && systemctl enable venus"
  fi
}

next_steps() {
  local enable_hint=""
  [ "$ENABLE" -eq 1 ] || enable_hint="systemctl enable venus && "
  cat >&2 <<EOF

Installed. Next (README.md, "Deployment"):
  1. Engines: TensorRT engines belong to the device they are built on, so export on it
     (needs --with-export) into /var/lib/venus/engines; see docs/engines.md:
       sudo /opt/venus/bin/venus export CHECKPOINT --out /var/lib/venus/engines --precision int4
       sudo chown -R venus:venus /var/lib/venus/engines
  2. Configuration: edit /etc/venus/venus.toml, then check it and the machine:
       sudo -u venus /opt/venus/bin/venus config check /etc/venus/venus.toml
       sudo -u venus /opt/venus/bin/venus doctor
  3. Broker: mosquitto with systemd/mosquitto/venus.conf and its ACL (systemd/mosquitto/acl);
     one broker user per node (mosquitto_passwd), see the comments in those files.
  4. Start: ${enable_hint}systemctl start venus; journalctl -u venus -f
  Workers: /etc/venus/workers/NAME.env (example: /etc/venus/workers/worker.env.example) and
     NAME.credentials (0600), then systemctl enable --now venus-worker@NAME
  GPU: the daemon is installed with the CPU build of ONNX Runtime; for CUDA / TensorRT see
     README.md, "GPU install" (on a Jetson, JetPack's onnxruntime-gpu wheel).
EOF
  if [ -z "$ROOT" ] && command -v nvidia-smi >/dev/null && [ ! -e /dev/nvidia-uvm ]; then
    note "/dev/nvidia-uvm is missing; the service cannot create it: run nvidia-modprobe -u -c=0 at boot"
  fi
}

do_install() {
  install_system_packages
  create_user
  make_directories
  install_config
  install_venv
  install_units
  next_steps
}

# -------------------------------------------------------------------------- uninstall

worker_instances() {  # enabled or loaded venus-worker@NAME.service units
  {
    find "$UNITS" -path '*.wants/venus-worker@*.service' -printf '%f\n' 2>/dev/null || true
    if systemd_running; then
      systemctl list-units --all --plain --no-legend 'venus-worker@*.service' | awk '{ print $1 }'
    fi
  } | sort -u
}

do_uninstall() {
  say "removing the units and $PREFIX"
  if systemd_running; then
    local workers
    mapfile -t workers < <(worker_instances)
    systemctl disable --now venus.service "${workers[@]}" || true
  fi
  rm -f "$UNITS/venus.service" "$UNITS/venus-worker@.service" "$USER_UNITS/venus.service"
  # Enablement symlinks that systemctl did not remove (or that were made without it).
  find "$UNITS" "$USER_UNITS" -path '*.wants/*' -type l \
    \( -name venus.service -o -name 'venus-worker@*.service' \) -delete 2>/dev/null || true
  if systemd_running; then
    systemctl daemon-reload
    systemctl reset-failed 'venus*' 2>/dev/null || true
  fi
  rm -rf "$PREFIX"
  if [ "$MODE" = purge ]; then
    say "purging $ETC, $STATE and $CACHE"
    rm -rf "$ETC" "$STATE" "$CACHE"
    note "the user $USER_NAME is kept (userdel $USER_NAME removes it)"
  else
    note "kept $ETC (configuration), $STATE (journal, engines) and $CACHE; --purge removes them"
  fi
  note "users who enabled the desktop unit: systemctl --user disable venus"
}

case "$MODE" in
  install) do_install ;;
  uninstall|purge) do_uninstall ;;
esac
