#!/usr/bin/env bash
# Install (or upgrade in place) Kura on a Raspberry Pi (64-bit Raspberry Pi OS / Debian arm64)
# or a PC (the x86_64 bundle). The .deb is the other way in; both run the same set-up (setup).
# Run from the unpacked kura-<version>-<arch>-linux directory, as root:
#
#   sudo ./install.sh                 install or upgrade; keeps data and edited configs
#   sudo ./install.sh --uninstall     remove services and binaries; keep /var/lib/kura, /etc/kura
#   sudo ./install.sh --uninstall --purge   ... and remove the data, configs and the kura user
#
# Testing aids: --root DIR installs into DIR instead of / (no user, no systemctl);
# --no-start installs without starting the services.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=""
uninstall=0
purge=0
start=1
while [ $# -gt 0 ]; do
    case "$1" in
        --uninstall) uninstall=1 ;;
        --purge) purge=1 ;;
        --root) root=${2%/}; shift ;;
        --no-start) start=0 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
units="kura-mikado kura-serve kura-aegis kura-minato kura-hashi"
live=0
if [ -z "$root" ]; then
    live=1
    [ "$(id -u)" -eq 0 ] || { echo "install.sh: run as root (sudo ./install.sh)" >&2; exit 2; }
fi
systemctl_() { if [ $live = 1 ] && command -v systemctl >/dev/null; then systemctl "$@"; fi; }

if [ $uninstall = 1 ]; then
    for u in $units; do systemctl_ disable --now "$u.service" 2>/dev/null || true; done
    rm -f "$root"/etc/systemd/system/kura-*.service
    systemctl_ daemon-reload || true
    rm -rf "$root/opt/kura"
    for b in kura minato aegis; do
        [ -L "$root/usr/local/bin/$b" ] && rm -f "$root/usr/local/bin/$b"
    done
    if [ $purge = 1 ]; then
        rm -rf "$root/var/lib/kura" "$root/var/lib/kura-serve" "$root/etc/kura"
        if [ $live = 1 ] && id kura >/dev/null 2>&1; then userdel kura || true; fi
        echo "Kura removed, data and configs purged."
    else
        echo "Kura removed. Data kept in /var/lib/kura and /var/lib/kura-serve, configs in /etc/kura (--purge removes them)."
    fi
    exit 0
fi

if [ $live = 1 ]; then
    arch=$(uname -m)
    want=$(cat "$here/ARCH" 2>/dev/null || echo aarch64)
    [ "$arch" = "$want" ] || { echo "install.sh: this bundle is for $want, not $arch" >&2; exit 2; }
    (cd "$here" && sha256sum --quiet -c SHA256SUMS) || { echo "install.sh: SHA256SUMS do not match" >&2; exit 1; }
    if command -v dpkg-query >/dev/null && dpkg-query -S /opt/kura/bin/kura >/dev/null 2>&1; then
        echo "install.sh: Kura is installed here from its package; upgrade it with sudo apt install ./kura_*.deb" >&2
        exit 2
    fi
fi

# Never through a symlink (the set-up checks the same again): refused before anything is
# stopped or replaced.
for d in "$root/var/lib/kura" "$root/var/lib/kura-serve" "$root/etc/kura" "$root/opt/kura"; do
    if [ -L "$d" ]; then echo "install.sh: $d is a symlink; refusing to install through it" >&2; exit 1; fi
done
install -d -m 0755 "$root/opt/kura/bin" "$root/opt/kura/config" "$root/opt/kura/lib" \
    "$root/etc/systemd/system" "$root/usr/local/bin"
# Stop running services before replacing their binaries (an upgrade).
for u in $units; do systemctl_ stop "$u.service" 2>/dev/null || true; done
for b in kura mikado minato hashi aegis nats-server; do
    install -m 0755 "$here/bin/$b" "$root/opt/kura/bin/$b"
done
install -m 0644 "$here/README.md" "$root/opt/kura/README.md" 2>/dev/null || true
for b in kura minato aegis; do ln -sfn "/opt/kura/bin/$b" "$root/usr/local/bin/$b"; done
# The shipped defaults; the set-up copies them into /etc/kura once.
for f in "$here"/config/*; do install -m 0644 "$f" "$root/opt/kura/config/$(basename "$f")"; done
install -m 0755 "$here/setup" "$root/opt/kura/lib/setup"
for f in "$here"/systemd/*.service; do install -m 0644 "$f" "$root/etc/systemd/system/$(basename "$f")"; done

# The user, configs, keys, the database and serve's state: the same set-up the .deb runs.
if [ $live = 1 ]; then
    /opt/kura/lib/setup
else
    "$root/opt/kura/lib/setup" --root "$root"
fi

systemctl_ daemon-reload
for u in $units; do systemctl_ enable "$u.service"; done
if [ $start = 1 ]; then
    for u in $units; do systemctl_ restart "$u.service"; done
fi
echo "Kura installed: binaries in /opt/kura/bin, configs in /etc/kura, data in /var/lib/kura."
[ $live = 1 ] && [ $start = 1 ] && { sleep 3; /opt/kura/bin/kura --db /var/lib/kura/kura.db status || true; }
exit 0
