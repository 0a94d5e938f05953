//! `mikado`: Kura's soul daemon.

use std::process::ExitCode;

/// The fleet's hub block, which has no default (README: A fleet of Pis).
const HUB: &str = "\
# A fleet's hub, joined as a leaf node (`kura fleet add-pi` prints this block):
# [nats.hub]
# urls = [\"tls://hub.lan:7422\"]          # one per hub node
# seed = \"/etc/kura/fleet/leaf.seed\"     # this Pi's leaf seed; unset: the systemd credential hub-leaf.seed
# ca = \"/etc/kura/fleet/hub-ca.pem\"      # the hub's CA; unset: the systemd credential hub-ca.pem
";

fn main() -> ExitCode {
    kura_runtime::cli::main_with_notes(
        "mikado",
        "Mikado: runs and supervises Kura's bundled nats-server, and turns what agents deliver \
         into memory (facts, decisions, embeddings) for later sessions",
        HUB,
        mikado::run,
    )
}
