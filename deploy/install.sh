#!/usr/bin/env bash
# Install (or upgrade in place) Kura on a Raspberry Pi (64-bit Raspberry Pi OS / Debian arm64).
# Run from the unpacked kura-<version>-aarch64-linux directory, as root:
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
    [ "$arch" = aarch64 ] || { echo "install.sh: this bundle is for aarch64, not $arch" >&2; exit 2; }
    (cd "$here" && sha256sum --quiet -c SHA256SUMS) || { echo "install.sh: SHA256SUMS do not match" >&2; exit 1; }
    if ! id kura >/dev/null 2>&1; then
        useradd --system --home-dir /var/lib/kura --no-create-home --shell /usr/sbin/nologin kura
    fi
fi
owner() { if [ $live = 1 ]; then chown "$@"; fi; }

# Never follow a symlink this script did not make: the kura user owns /var/lib/kura and
# everything in it, so on an upgrade root touches nothing there (a kura.db that had become a
# symlink to /etc/shadow would otherwise be chown'd to kura).
for d in "$root/var/lib/kura" "$root/var/lib/kura-serve" "$root/etc/kura" "$root/opt/kura"; do
    if [ -L "$d" ]; then echo "install.sh: $d is a symlink; refusing to install through it" >&2; exit 1; fi
done
install -d -m 0755 "$root/opt/kura/bin" "$root/etc/kura" "$root/etc/systemd/system" "$root/usr/local/bin"
if [ ! -d "$root/var/lib/kura" ]; then
    install -d -m 0750 "$root/var/lib/kura"
    owner -h kura:kura "$root/var/lib/kura"
fi
# Stop running services before replacing their binaries (an upgrade).
for u in $units; do systemctl_ stop "$u.service" 2>/dev/null || true; done
for b in kura mikado minato hashi aegis nats-server; do
    install -m 0755 "$here/bin/$b" "$root/opt/kura/bin/$b"
done
install -m 0644 "$here/README.md" "$root/opt/kura/README.md" 2>/dev/null || true
for b in kura minato aegis; do ln -sfn "/opt/kura/bin/$b" "$root/usr/local/bin/$b"; done
# Configs: installed once; an upgrade never overwrites what the owner edited.
for f in "$here"/config/*; do
    dest="$root/etc/kura/$(basename "$f")"
    if [ -e "$dest" ]; then
        # Keep the owner's file; offer the shipped one beside it when they differ.
        cmp -s "$f" "$dest" || install -m 0644 "$f" "$dest.new"
    else
        install -m 0644 "$f" "$dest"
    fi
done
for f in "$here"/systemd/*.service; do install -m 0644 "$f" "$root/etc/systemd/system/$(basename "$f")"; done

# Bus identities: a seed per service, the identity list, a local CA and the server
# certificate — made once, kept by root in a 0700 directory; systemd hands each unit only
# its own seed (LoadCredential=), so no daemon can read another's key. An upgrade keeps them.
keys="$root/etc/kura/keys"
if [ ! -e "$keys/identities.toml" ]; then
    if [ $live = 1 ]; then
        hosts=()
        for h in $(hostname 2>/dev/null) $(hostname -I 2>/dev/null); do hosts+=(--host "$h"); done
        /opt/kura/bin/kura keys init --dir /etc/kura/keys "${hosts[@]}"
    else
        "${KURA_INIT:-$root/opt/kura/bin/kura}" keys init --dir "$keys"
    fi
elif ! grep -q '^signer' "$keys/identities.toml" || [ ! -e "$keys/console.pem" ]; then
    # Made by an older Kura: services get bus keys derived from their seeds (one key, one
    # purpose) and the console a certificate of its own; it says which people re-add theirs.
    if [ $live = 1 ]; then
        hosts=()
        for h in $(hostname 2>/dev/null) $(hostname -I 2>/dev/null); do hosts+=(--host "$h"); done
        /opt/kura/bin/kura keys upgrade --dir /etc/kura/keys "${hosts[@]}"
    else
        "${KURA_INIT:-$root/opt/kura/bin/kura}" keys upgrade --dir "$keys"
    fi
fi

# The seal log's key: kura serve signs checkpoints with it (systemd hands it over as a
# credential; no other unit sees it). Its verifier key is pinned in serve.toml, where
# `kura verify` and the witnesses read it. Made once; an upgrade keeps it.
logkey="$root/etc/kura/log.key"
if [ ! -e "$logkey" ]; then
    # The origin names this log to every witness; two Pis left at hostname `raspberrypi`
    # must not share one (a witness would refuse the second), so it carries a random id.
    id=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
    name="kura.$(hostname 2>/dev/null || echo pi)/log/$id"
    if [ $live = 1 ]; then
        vkey=$(/opt/kura/bin/kura log-key init --out /etc/kura/log.key --name "$name" | tail -n 1)
    else
        vkey=$("${KURA_INIT:-$root/opt/kura/bin/kura}" log-key init --out "$logkey" --name "$name" | tail -n 1)
    fi
    # Right under the [serve] header (other tables, such as [console], follow it). A verifier
    # key is name+hex+base64: no character sed's `a` text treats specially.
    grep -q '^log_verifier' "$root/etc/kura/serve.toml" \
        || sed -i "/^\[serve\]\$/a log_verifier = \"$vkey\"" "$root/etc/kura/serve.toml"
fi

# The database: created once, by the kura user (so kura owns it), mode 0600 (`kura init`
# makes it private). An upgrade leaves it alone: no chmod or chown as root through whatever
# the kura user may have put at that path.
db="$root/var/lib/kura/kura.db"
fresh_db=0
if [ ! -e "$db" ] && [ ! -L "$db" ]; then
    fresh_db=1
    if [ $live = 1 ]; then
        runuser -u kura -- /opt/kura/bin/kura --db /var/lib/kura/kura.db init
    else
        "${KURA_INIT:-$root/opt/kura/bin/kura}" --db "$db" init
    fi
fi

# kura serve's own state: the signer's last checkpoint and a witness directory, where no
# other unit can write (systemd's StateDirectory= makes it too; made here so a --root install
# and `kura verify` see it before the first start). Made once, never through a symlink.
state="$root/var/lib/kura-serve"
if [ -L "$state" ]; then echo "install.sh: $state is a symlink; refusing to install through it" >&2; exit 1; fi
if [ ! -d "$state" ]; then
    install -d -m 0700 "$state"
    owner -h kura:kura "$state"
fi
# An older install kept the signer's last checkpoint beside the database, where every unit
# could delete it. Its copy moves here once, made by the kura user (root never reads through
# what kura may have put at that path); missing, kura serve raises an ALARM and signs nothing
# until a person runs `kura checkpoint --key /etc/kura/log.key --trust-current`.
old_head="$root/var/lib/kura/kura.db.checkpoint"
if [ -f "$old_head" ] && [ ! -L "$old_head" ] && [ ! -e "$state/checkpoint" ]; then
    if [ $live = 1 ]; then
        runuser -u kura -- cp "/var/lib/kura/kura.db.checkpoint" "/var/lib/kura-serve/checkpoint"
    else
        cp "$old_head" "$state/checkpoint"
    fi
fi
# A fresh database: its empty log is signed now, so the signer's head exists before any
# daemon seals a ledger (were kura serve to start after the first turn, a missing head with
# a non-empty log would be an ALARM, as it must be for a head that was deleted).
if [ $fresh_db = 1 ] && [ ! -e "$state/checkpoint" ]; then
    if [ $live = 1 ]; then
        /opt/kura/bin/kura --db /var/lib/kura/kura.db checkpoint --key /etc/kura/log.key \
            --state /var/lib/kura-serve/checkpoint > /dev/null
    else
        "${KURA_INIT:-$root/opt/kura/bin/kura}" --db "$db" checkpoint --key "$logkey" \
            --state "$state/checkpoint" > /dev/null
    fi
fi
# An upgrade keeps the owner's serve.toml; the paths above are added under [serve] when it
# names none (a verifier key or path has no character sed's `a` text treats specially).
conf="$root/etc/kura/serve.toml"
add_serve_key() { grep -q "^$1 *=" "$conf" || sed -i "/^\[serve\]\$/a $1 = $2" "$conf"; }
add_serve_key checkpoint_file '"/var/lib/kura-serve/checkpoint"'
add_serve_key witness_state '"/var/lib/kura-serve/witnessed"'
add_serve_key witness_dirs '["/var/lib/kura-serve/witness"]'

systemctl_ daemon-reload
for u in $units; do systemctl_ enable "$u.service"; done
if [ $start = 1 ]; then
    for u in $units; do systemctl_ restart "$u.service"; done
fi
echo "Kura installed: binaries in /opt/kura/bin, configs in /etc/kura, data in /var/lib/kura."
[ $live = 1 ] && [ $start = 1 ] && { sleep 3; /opt/kura/bin/kura --db /var/lib/kura/kura.db status || true; }
exit 0
