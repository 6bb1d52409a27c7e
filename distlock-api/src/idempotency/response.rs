//! The stored result of a completed operation, and its byte encoding in the stores.

use crate::LockError;

/// The result of the first run of an operation, replayed to every retry: for HTTP, the
/// status, the headers worth replaying and the body — success or error alike (a 500 is
/// replayed as a 500).
///
/// Stores keep it as one opaque byte string ([`encode`](Self::encode)); any other
/// result (a serialised value) fits in `body` with status `0`.
///
/// ```
/// use distlock::idempotency::StoredResponse;
///
/// let response = StoredResponse::new(201, b"{\"id\":7}".to_vec()).with_header("content-type", "application/json");
/// let bytes = response.encode();
/// assert_eq!(StoredResponse::decode(&bytes)?, response);
/// # Ok::<(), distlock::LockError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredResponse {
    /// The HTTP status code (or any number meaningful to the application).
    pub status: u16,
    /// Header names and values, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

/// The first byte of the encoding, for future layouts.
const VERSION: u8 = 1;

impl StoredResponse {
    /// A response with `status`, no headers, and `body`.
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self { status, headers: Vec::new(), body: body.into() }
    }

    /// Adds a header.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The bytes stores keep: a version byte, the status, each header as length-prefixed
    /// name and value, then the body.
    pub fn encode(&self) -> Vec<u8> {
        let size = 7 + self.headers.iter().map(|(n, v)| 8 + n.len() + v.len()).sum::<usize>() + self.body.len();
        let mut out = Vec::with_capacity(size);
        out.push(VERSION);
        out.extend_from_slice(&self.status.to_be_bytes());
        out.extend_from_slice(&(self.headers.len() as u32).to_be_bytes());
        for (name, value) in &self.headers {
            out.extend_from_slice(&(name.len() as u32).to_be_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(value.len() as u32).to_be_bytes());
            out.extend_from_slice(value);
        }
        out.extend_from_slice(&self.body);
        out
    }

    /// Reads what [`encode`](Self::encode) wrote.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"decode response"`) when the bytes are not such an
    /// encoding: the record was written by something else.
    pub fn decode(bytes: &[u8]) -> Result<Self, LockError> {
        Reader(bytes).response().ok_or_else(|| {
            LockError::store(
                "idempotency",
                "decode response",
                None,
                "the stored response is not in distlock's encoding",
            )
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<usize> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?) as usize)
    }

    fn response(mut self) -> Option<StoredResponse> {
        if self.take(1)? != [VERSION] {
            return None;
        }
        let status = u16::from_be_bytes(self.take(2)?.try_into().ok()?);
        let count = self.u32()?;
        let mut headers = Vec::with_capacity(count.min(256));
        for _ in 0..count {
            let len = self.u32()?;
            let name = String::from_utf8(self.take(len)?.to_vec()).ok()?;
            let len = self.u32()?;
            headers.push((name, self.take(len)?.to_vec()));
        }
        Some(StoredResponse { status, headers, body: self.0.to_vec() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let response =
            StoredResponse::new(500, vec![0, 255, 10]).with_header("x-a", "1").with_header("x-b", vec![0xff]);
        assert_eq!(StoredResponse::decode(&response.encode()).unwrap(), response);
        assert_eq!(StoredResponse::decode(&StoredResponse::default().encode()).unwrap(), StoredResponse::default());
        for bad in [&b""[..], b"\x02", b"\x01\x00", b"\x01\x00\xc8\x00\x00\x00\x01\x00\x00\x00\x09ab"] {
            assert!(StoredResponse::decode(bad).is_err(), "{bad:?}");
        }
    }
}
