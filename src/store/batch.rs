//! What the writer is handed: a record of the model's ([`Record`]) under
//! the fence it was made under. The writer commits a batch only while its
//! fence still holds, checked in the same transaction.

use std::ops::{Deref, DerefMut};

use super::lease::Fence;
use crate::domain::Record;

#[derive(Debug, Default)]
pub struct WriteBatch {
    pub rows: Record,
    /// Who made it: the writer commits it only while this still holds.
    pub fence: Fence,
}

impl Deref for WriteBatch {
    type Target = Record;

    fn deref(&self) -> &Record {
        &self.rows
    }
}

impl DerefMut for WriteBatch {
    fn deref_mut(&mut self) -> &mut Record {
        &mut self.rows
    }
}

impl WriteBatch {
    pub fn new(rows: Record, fence: Fence) -> WriteBatch {
        WriteBatch { rows, fence }
    }

    /// Moves out the current-state rows under the same fence (see
    /// [`Record::take_state`]).
    pub fn take_state(&mut self) -> Option<WriteBatch> {
        let rows = self.rows.take_state()?;
        Some(WriteBatch::new(rows, self.fence.clone()))
    }

    /// Moves half of a batch of current-state rows alone into a batch of
    /// its own under the same fence, so that the two can be committed at
    /// once on two connections (see [`Record::split_half`]).
    pub fn split_half(&mut self, from: usize) -> Option<WriteBatch> {
        let rows = self.rows.split_half(from)?;
        Some(WriteBatch::new(rows, self.fence.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Ts;
    use crate::domain::{EndReason, EpisodeChange, Kind};

    #[test]
    fn the_parts_of_a_batch_keep_its_fence() {
        let fence = Fence::Leader {
            replica: "r1".into(),
            term: 3,
        };
        let mut b = WriteBatch::new(Record::default(), fence.clone());
        assert!(b.take_state().is_none(), "nothing to move");
        for i in 0..10 {
            b.put_server(&crate::domain::test_server(
                Kind::Proxy,
                &format!("p{i}"),
                Ts(i),
            ));
        }
        let half = b.split_half(4).expect("large enough");
        assert_eq!((half.fence.clone(), half.servers.len()), (fence.clone(), 5));
        b.episodes
            .push(EpisodeChange::close(1, Ts(1), EndReason::Recovered));
        let state = b.take_state().expect("state");
        assert_eq!((&state.fence, state.servers.len()), (&fence, 5));
        assert_eq!(b.episodes.len(), 1, "history stays");
    }
}
