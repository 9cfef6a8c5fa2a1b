//! Prost's wire primitives for reading a message where it lies: a
//! field's key, a varint, a length-delimited field, a string, an unknown
//! field skipped. Each reads as prost reads and says `None` wherever
//! prost would refuse the bytes or do more than read them (a group), so
//! that a caller falls back to prost's own decoding. They are inlined:
//! the watch reads every node heartbeat with them.
//!
//! Owns: the bytes of one field at a time. Must not touch: what any
//! message means.

use prost::encoding::{decode_key, decode_varint, WireType};

#[inline]
pub(super) fn key(buf: &mut &[u8]) -> Option<(u32, WireType)> {
    decode_key(buf).ok()
}

/// A varint field; any other wire type is prost's error.
#[inline]
pub(super) fn varint(buf: &mut &[u8], wt: WireType) -> Option<u64> {
    (wt == WireType::Varint).then_some(())?;
    decode_varint(buf).ok()
}

/// A length-delimited field's bytes.
#[inline]
pub(super) fn delimited<'a>(buf: &mut &'a [u8], wt: WireType) -> Option<&'a [u8]> {
    (wt == WireType::LengthDelimited).then_some(())?;
    let len = usize::try_from(decode_varint(buf).ok()?).ok()?;
    let (field, rest) = buf.split_at_checked(len)?;
    *buf = rest;
    Some(field)
}

/// A string field: UTF-8, as prost requires.
#[inline]
pub(super) fn text<'a>(buf: &mut &'a [u8], wt: WireType) -> Option<&'a str> {
    std::str::from_utf8(delimited(buf, wt)?).ok()
}

/// An unknown field, skipped as prost skips it; groups end the reading.
#[inline]
pub(super) fn skip(buf: &mut &[u8], wt: WireType) -> Option<()> {
    let len = match wt {
        WireType::Varint => {
            decode_varint(buf).ok()?;
            return Some(());
        }
        WireType::ThirtyTwoBit => 4,
        WireType::SixtyFourBit => 8,
        WireType::LengthDelimited => usize::try_from(decode_varint(buf).ok()?).ok()?,
        WireType::StartGroup | WireType::EndGroup => return None,
    };
    *buf = buf.get(len..)?;
    Some(())
}
