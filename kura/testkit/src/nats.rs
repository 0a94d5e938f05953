//! A real `nats-server` on a free loopback port with authentication and TLS on, killed on
//! drop (in the style of nats.rs's own test helper); the runtime owns it because `kura bench`
//! needs one too.

pub use kura_runtime::natsbin::{NatsServer, free_port};

use kura_runtime::identity::Role;

/// Publishes `messages` as `role` and flushes. Returns how many the client sent (it refuses
/// payloads over the server's limit itself); the server drops, without a word to us, what
/// `role` may not publish.
pub fn publish_as(nats: &NatsServer, role: Role, messages: &[(String, Vec<u8>)]) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let c = nats.client(role).await.expect("connect");
        let mut sent = 0;
        for (subject, payload) in messages {
            if c.publish(subject.clone(), payload.clone().into())
                .await
                .is_ok()
            {
                sent += 1;
            }
        }
        c.flush().await.expect("flush");
        sent
    })
}
