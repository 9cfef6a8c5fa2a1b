//! An Auth API call whose request is encoded by the generated client's
//! codec and whose answers are read by Lifeline's own decoder: the raw
//! pages of `ListResources` (`pages.rs`) and the watch's events read in
//! place (`heartbeat.rs`) both go through it.
//!
//! Owns: the codec pairing. Must not touch: what an answer means.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{Codec, Decoder};
use tonic::Status;

use crate::proto::codec::Lean;

/// An Auth API call whose request goes as the generated client encodes
/// it (its codec, `E`), and whose answers are read by Lifeline's own
/// decoder `D`: the raw page bytes here, the watch's events in
/// `heartbeat`.
pub(super) struct Call<E, D>(PhantomData<(E, D)>);

impl<E, D> Default for Call<E, D> {
    fn default() -> Self {
        Call(PhantomData)
    }
}

impl<E, D> Codec for Call<E, D>
where
    E: Message + Default + Send + 'static,
    D: Decoder<Error = Status> + Default + Send + 'static,
    D::Item: Send + 'static,
{
    type Encode = E;
    type Decode = D::Item;
    type Encoder = <Lean<E, E> as Codec>::Encoder;
    type Decoder = D;

    fn encoder(&mut self) -> Self::Encoder {
        Lean::<E, E>::default().encoder()
    }

    fn decoder(&mut self) -> D {
        D::default()
    }
}
