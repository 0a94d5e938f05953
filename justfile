# Developer commands (`just --list`). Install just with `cargo install just` or your
# distribution's package; every recipe is a plain script you can also run directly.

# The whole system on the embedded defaults (README command 1).
demo:
    ./scripts/demo

# Every test, as CI runs them (README command 2).
test *args:
    ./scripts/test {{args}}

# Formatting, lints, docs and dependency policy, as CI checks them.
check:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
    cargo deny check licenses bans sources

# The fault suite: `just chaos` (long form, writes RELIABILITY.md) or `just chaos --ci`.
chaos *args:
    ./scripts/chaos {{args}}

# Benchmarks beside same-run baselines; writes BENCHMARKS.md.
bench *args:
    ./scripts/bench {{args}}

# Each fuzz target for SECONDS (nightly + cargo-fuzz).
fuzz seconds="60":
    ./scripts/fuzz {{seconds}}

# The Pi: cross build, bundle, and the emulated end-to-end run under qemu.
pi:
    ./deploy/release
    ./deploy/smoke-aarch64

# Everything CI runs, on this machine.
ci:
    bash .ci/run
