//! Discovery wakes, by connection. When the board changes, the streams
//! that share an HTTP/2 connection are woken one after the other, so they
//! run together and hand their frames to the connection before its task
//! writes them out in one go (`tls::coalesce`). Woken by one shared watch
//! instead, 50 000 streams ran in the order they happened to wait in, and
//! a connection wrote once per stream.

use rustc_hash::FxHashMap;

use super::*;

/// One watch per connection that holds agent streams.
#[derive(Default)]
pub(super) struct Wakes {
    groups: Mutex<FxHashMap<String, Arc<watch::Sender<u64>>>>,
}

impl Wakes {
    /// What wakes a stream on connection `conn` (its peer address) when
    /// the board changes.
    pub(super) fn subscribe(&self, conn: &str, version: u64) -> watch::Receiver<u64> {
        let mut groups = lock(&self.groups);
        match groups.get(conn) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(version);
                groups.insert(conn.to_string(), Arc::new(tx));
                rx
            }
        }
    }

    /// Wakes every connection's streams, a connection at a time, with
    /// `version`; forgets connections whose streams have all ended.
    fn wake_all(&self, version: u64) {
        let groups: Vec<Arc<watch::Sender<u64>>> = {
            let mut groups = lock(&self.groups);
            groups.retain(|_, tx| tx.receiver_count() > 0);
            groups.values().cloned().collect()
        };
        for tx in groups {
            tx.send_replace(version);
        }
    }
}

/// Wakes every connection's streams, a connection at a time, whenever the
/// board changes; forgets connections whose streams have all ended.
pub(super) async fn fan(hub: Arc<Hub>, stop: CancellationToken) {
    let mut versions = hub.board.subscribe();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = versions.changed() => if changed.is_err() { return },
        }
        let v = *versions.borrow_and_update();
        hub.wakes.wake_all(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_woken_by_connection_and_ended_connections_forgotten() {
        let wakes = Wakes::default();
        let mut a1 = wakes.subscribe("10.0.0.1:5000", 3);
        let mut a2 = wakes.subscribe("10.0.0.1:5000", 3);
        let b = wakes.subscribe("10.0.0.2:5000", 3);
        assert_eq!(lock(&wakes.groups).len(), 2);
        drop(b);
        wakes.wake_all(4);
        for rx in [&mut a1, &mut a2] {
            assert!(rx.has_changed().unwrap());
            assert_eq!(*rx.borrow_and_update(), 4);
        }
        // The connection whose streams all ended is gone.
        assert_eq!(lock(&wakes.groups).len(), 1);
        // A stream that joins later starts from the version it was given.
        let late = wakes.subscribe("10.0.0.3:5000", 4);
        assert!(!late.has_changed().unwrap());
    }
}
