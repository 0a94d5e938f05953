//! A rogue responder: a bus identity that answers every request on a subject at once, with
//! bytes of its choosing and no signature, to race the real responder.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kura_runtime::identity::Role;

use crate::NatsServer;

/// Answers every request on its subject with its payload until dropped.
pub struct Rogue {
    answered: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Rogue {
    /// Starts answering `subject` as the operator identity (it may publish anywhere).
    pub fn start(
        rt: &tokio::runtime::Runtime,
        nats: &NatsServer,
        subject: String,
        payload: &'static str,
    ) -> Rogue {
        let rogue = rt.block_on(nats.client(Role::Operator)).expect("operator");
        let mut asked = rt.block_on(rogue.subscribe(subject)).expect("subscribe");
        rt.block_on(rogue.flush()).expect("flush");
        let answered = Arc::new(AtomicUsize::new(0));
        let count = answered.clone();
        let task = rt.spawn(async move {
            while let Some(m) = asked.next().await {
                if let Some(to) = m.reply {
                    let _ = rogue.publish(to, payload.into()).await;
                    let _ = rogue.flush().await;
                    count.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Rogue { answered, task }
    }

    /// How many requests it has answered.
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    /// Waits (at most `timeout`) until it has answered once; whether it did.
    pub fn wait_answered(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.answered() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.answered() > 0
    }
}

impl Drop for Rogue {
    fn drop(&mut self) {
        self.task.abort();
    }
}
