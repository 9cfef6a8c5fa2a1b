//! The generated services' codec: prost's decoder, with a 1 KiB first
//! buffer for each direction of each call instead of tonic's 8 KiB, and an
//! encoder that makes room for a message before writing it.
//!
//! A signal stream lives as long as its agent and carries messages of a
//! few hundred bytes, so the two 8 KiB buffers were most of what each of
//! 50 000 streams cost a server. A large message (a listing page of
//! megabytes) is measured first and written into room made once: prost
//! alone writes it into a buffer that doubles from that first kilobyte,
//! copying and faulting in the page a dozen times over.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder};

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
    type Encoder = LeanEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        LeanEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}

/// Writes a message into room made for all of it at once.
#[derive(Debug, Clone)]
pub struct LeanEncoder<T>(PhantomData<T>);

impl<T: prost::Message> Encoder for LeanEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // `Message::encode` measures the message too, and then refuses a
        // buffer with less room; this buffer grows, so making the room is
        // all the check there is to do. Tonic compares the written length
        // with the call's limit afterwards.
        buf.reserve(item.encoded_len());
        item.encode_raw(buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        settings()
    }
}
