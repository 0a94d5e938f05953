//! A real `nats-server` on a free loopback port, killed on drop (in the style of nats.rs's
//! own test helper); the runtime owns it because `kura bench` needs one too.

pub use kura_runtime::natsbin::{NatsServer, free_port};
