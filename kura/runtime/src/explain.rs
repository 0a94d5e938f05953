//! Why a connection to the bus failed, in words that say which key or CA and what to do next
//! (async-nats says only "authorization violation" or "TLS error").

use std::path::Path;

use crate::identity;

/// What went wrong connecting to `url` as `key` (the root key, if any) pinning `ca`, given
/// async-nats's description of it (a [`async_nats::ConnectErrorKind`]'s text), and what to
/// do about it.
pub fn connect_failure(
    kind: &str,
    key: Option<&nkeys::KeyPair>,
    ca: Option<&Path>,
    url: &str,
) -> String {
    let kind = kind.to_ascii_lowercase();
    if kind.contains("authorization") || kind.contains("signing nonce") {
        return match key {
            None => format!(
                "the bus at {url} refused an anonymous client ({kind}): give this process its seed \
                 (KURA_NATS_SEED or [common] nats_seed; under systemd the unit passes nats.nk)"
            ),
            Some(root) => {
                let bus = identity::bus_key(root)
                    .map(|k| k.public_key())
                    .unwrap_or_else(|_| "?".into());
                format!(
                    "the bus at {url} refused the bus key {bus} ({kind}): it is not in identities.toml \
                     (`kura keys list` on the Pi; a person is added with `kura keys \
                     add-approver`), or mikado has not restarted since it was added \
                     (systemctl restart kura-mikado)"
                )
            }
        };
    }
    if kind.contains("tls") || kind.contains("certificate") {
        return match ca {
            None => format!(
                "TLS with {url} failed ({kind}) and no CA is pinned: set KURA_NATS_CA ([common] nats_ca) \
                 to a copy of the Pi's /etc/kura/keys/nats-ca.pem"
            ),
            Some(ca) => format!(
                "TLS with {url} failed ({kind}): the server's certificate is not signed by the pinned CA \
                 {} (copy the Pi's /etc/kura/keys/nats-ca.pem), or it does not name this \
                 address (on the Pi: `kura keys init --host ADDRESS` in a new keys directory)",
                ca.display()
            ),
        };
    }
    if kind.contains("timed out") || kind.contains("io error") || kind.contains("dns") {
        return format!(
            "nothing answers at {url} ({kind}): is kura-mikado running (it starts the bus), and \
             is the address right (KURA_NATS_URL, [common] nats_url)?"
        );
    }
    format!("cannot connect to the bus at {url}: {kind}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::Credentials;
    use std::sync::Arc;

    #[test]
    fn each_failure_names_the_key_or_ca_and_the_next_step() {
        let url = "tls://127.0.0.1:4222";
        let anonymous = Credentials::default();
        assert!(
            connect_failure(
                "authorization violation",
                anonymous.key.as_deref(),
                anonymous.ca.as_deref(),
                url
            )
            .contains("KURA_NATS_SEED")
        );
        let root = Arc::new(nkeys::KeyPair::new_user());
        let bus = identity::bus_key(&root).expect("bus").public_key();
        let keyed = Credentials {
            key: Some(root),
            ca: Some("/home/ana/kura-ca.pem".into()),
        };
        let refused = connect_failure(
            "authorization violation",
            keyed.key.as_deref(),
            keyed.ca.as_deref(),
            url,
        );
        assert!(
            refused.contains(&bus) && refused.contains("kura keys"),
            "{refused}"
        );
        let tls = connect_failure("TLS error", keyed.key.as_deref(), keyed.ca.as_deref(), url);
        assert!(
            tls.contains("/home/ana/kura-ca.pem") && tls.contains("nats-ca.pem"),
            "{tls}"
        );
        assert!(
            connect_failure(
                "TLS error",
                anonymous.key.as_deref(),
                anonymous.ca.as_deref(),
                url
            )
            .contains("KURA_NATS_CA")
        );
        assert!(
            connect_failure("IO error", keyed.key.as_deref(), keyed.ca.as_deref(), url)
                .contains("kura-mikado")
        );
        // What async-nats reports for another CA's certificate: an I/O error with its cause.
        let unknown =
            "IO error: Custom { kind: InvalidData, error: InvalidCertificate(BadSignature) }";
        assert!(
            connect_failure(unknown, keyed.key.as_deref(), keyed.ca.as_deref(), url)
                .contains("/home/ana/kura-ca.pem")
        );
    }
}
