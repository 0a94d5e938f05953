# Sourced by deploy/build, bundle and package: `--arch` (aarch64 or x86_64, Debian's arm64
# and amd64 too; the host's by default) into ARCH, the Rust TARGET and the Debian DEB_ARCH.
arch_from_args() {
    ARCH=$(uname -m)
    while [ $# -gt 0 ]; do
        case "$1" in
            --arch) ARCH=${2:?--arch needs aarch64 or x86_64}; shift 2 ;;
            -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
            *) echo "$(basename "$0"): unknown argument $1" >&2; exit 2 ;;
        esac
    done
    case "$ARCH" in
        aarch64|arm64) ARCH=aarch64; DEB_ARCH=arm64 ;;
        x86_64|amd64) ARCH=x86_64; DEB_ARCH=amd64 ;;
        *) echo "$(basename "$0"): --arch is aarch64 or x86_64, not $ARCH" >&2; exit 2 ;;
    esac
    TARGET=$ARCH-unknown-linux-gnu
    VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
}
