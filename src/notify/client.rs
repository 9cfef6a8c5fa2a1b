//! The HTTP client each destination posts with: rustls with the system's
//! roots plus an optional CA file, no redirects (a receiver's redirect is
//! not followed with a signed body), and files read with a bound.

use std::path::Path;
use std::time::Duration;

use super::NotifyError;

/// The most a secret, token or password file may hold.
const MAX_SECRET_BYTES: u64 = 4096;
/// The most a CA file may hold.
const MAX_CA_BYTES: u64 = 1 << 20;

pub fn build(ca_file: Option<&Path>, timeout: Duration) -> Result<reqwest::Client, NotifyError> {
    let mut b = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("lifeline/", env!("CARGO_PKG_VERSION")));
    if let Some(path) = ca_file {
        let pem = read_bounded(path, MAX_CA_BYTES)?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| NotifyError::File {
            path: path.display().to_string(),
            why: format!("not PEM certificates: {e}"),
        })?;
        if certs.is_empty() {
            return Err(NotifyError::File {
                path: path.display().to_string(),
                why: "holds no certificate".into(),
            });
        }
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    b.build().map_err(|e| NotifyError::Client(e.to_string()))
}

fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, NotifyError> {
    use std::io::Read;
    let err = |why: String| NotifyError::File {
        path: path.display().to_string(),
        why,
    };
    let f = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut buf = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| err(e.to_string()))?;
    if buf.len() as u64 > max {
        return Err(err(format!("is larger than {max} bytes")));
    }
    Ok(buf)
}

/// A secret from its file, without its trailing newline; the error never
/// holds the file's content.
pub fn secret(path: &Path) -> Result<Vec<u8>, NotifyError> {
    let mut s = read_bounded(path, MAX_SECRET_BYTES)?;
    while s.last().is_some_and(|b| b.is_ascii_whitespace()) {
        s.pop();
    }
    if s.is_empty() {
        return Err(NotifyError::File {
            path: path.display().to_string(),
            why: "is empty".into(),
        });
    }
    Ok(s)
}
