//! The generated services' codec: prost's, with a 1 KiB first buffer for
//! each direction of each call instead of tonic's 8 KiB. A signal stream
//! lives as long as its agent and carries messages of a few hundred bytes,
//! so the two 8 KiB buffers were most of what each of 50 000 streams cost
//! a server; a larger message grows its buffer as before.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// First size of a call's encode and decode buffers.
pub const BUFFER_BYTES: usize = 1024;
/// Bytes encoded before a stream lets its task yield: tonic's default.
const YIELD_THRESHOLD: usize = 32 * 1024;

#[derive(Debug, Clone)]
pub struct Lean<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Lean<T, U> {
    fn default() -> Self {
        Lean(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_THRESHOLD)
}

impl<T, U> Codec for Lean<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}
