//! Webhook signatures: `X-Lifeline-Signature: t=<unix seconds>,v1=<hex>`,
//! where the hex is HMAC-SHA256 under the webhook's secret of
//! `<t>.<body>` (the scheme Stripe's webhooks use). A receiver recomputes
//! it, compares in constant time, and refuses a `t` too far from its own
//! clock (a replay).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header that carries the signature.
pub const HEADER: &str = "X-Lifeline-Signature";

/// The signature header's value for `body` sent at `unix` seconds.
pub fn signature(secret: &[u8], unix: i64, body: &[u8]) -> String {
    format!("t={unix},v1={}", hex::encode(mac(secret, unix, body)))
}

fn mac(secret: &[u8], unix: i64, body: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length: this cannot fail.
    let mut m = match <Hmac<Sha256> as KeyInit>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return Vec::new(),
    };
    m.update(unix.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m.finalize().into_bytes().to_vec()
}

/// Why a signature is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the signature header is not t=<unix>,v1=<hex>")]
    Malformed,
    #[error("the signature does not match the body under this secret")]
    Mismatch,
    #[error("the signature's time is {0} s from now: a replay, or a clock far off")]
    Stale(i64),
}

/// Checks `header` for `body` at `now_unix`, allowing `tolerance` seconds
/// either way: what a receiver does (the book's recipe, in Rust).
pub fn verify(
    secret: &[u8],
    header: &str,
    body: &[u8],
    now_unix: i64,
    tolerance: i64,
) -> Result<(), Refusal> {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => v1.push(hex::decode(v).map_err(|_| Refusal::Malformed)?),
            _ => return Err(Refusal::Malformed),
        }
    }
    let (Some(t), false) = (t, v1.is_empty()) else {
        return Err(Refusal::Malformed);
    };
    let expected = mac(secret, t, body);
    let ok = v1
        .iter()
        .any(|got| subtle::ConstantTimeEq::ct_eq(got.as_slice(), expected.as_slice()).into());
    if !ok {
        return Err(Refusal::Mismatch);
    }
    let skew = now_unix.saturating_sub(t);
    if skew.saturating_abs() > tolerance {
        return Err(Refusal::Stale(skew));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_and_a_wrong_secret_body_or_time_does_not() {
        let body = br#"{"id":1,"type":"incident.opened"}"#;
        let h = signature(b"s3cret", 1_700_000_000, body);
        assert!(h.starts_with("t=1700000000,v1="));
        assert_eq!(verify(b"s3cret", &h, body, 1_700_000_010, 300), Ok(()));
        assert_eq!(
            verify(b"other", &h, body, 1_700_000_010, 300),
            Err(Refusal::Mismatch)
        );
        assert_eq!(
            verify(
                b"s3cret",
                &h,
                br#"{"id":2,"type":"incident.opened"}"#,
                1_700_000_010,
                300
            ),
            Err(Refusal::Mismatch)
        );
        // The same delivery an hour later: a replay.
        assert_eq!(
            verify(b"s3cret", &h, body, 1_700_003_600, 300),
            Err(Refusal::Stale(3600))
        );
        // A time moved forward with the old hex does not match.
        let moved = h.replace("t=1700000000", "t=1700003600");
        assert_eq!(
            verify(b"s3cret", &moved, body, 1_700_003_600, 300),
            Err(Refusal::Mismatch)
        );
        for bad in ["", "t=1", "v1=00", "t=x,v1=00", "t=1,v1=zz", "t=1,v2=00"] {
            assert_eq!(
                verify(b"s3cret", bad, body, 1, 300),
                Err(Refusal::Malformed),
                "{bad}"
            );
        }
    }

    /// The value the book's recipe (Python's `hmac`) computes for the same
    /// secret, time and body.
    #[test]
    fn the_signature_is_what_pythons_hmac_computes() {
        let h = signature(b"whsec_example", 1_764_000_000, b"{\"id\":1}");
        assert_eq!(
            h,
            "t=1764000000,v1=58609e9d2e6367f3781a7473536c379c2475eb8a83cbbb2e28d54c03f06ed53b"
        );
    }
}
