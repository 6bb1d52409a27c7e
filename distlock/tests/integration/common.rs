//! Helpers shared by the front crate's tests (each test binary uses some of them).
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};

/// A `MakeWriter` that appends the formatted tracing output (spans included) to a shared
/// buffer.
#[derive(Clone, Default)]
pub(crate) struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Buffer {
    /// Everything written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffer {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

/// Sends `POST path` to `addr` as raw HTTP/1.1 and returns the status code and body.
pub(crate) async fn post(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    (status, body)
}

/// The body of a `lock-not-acquired` problem answered with `status` for `key`, byte for
/// byte: the format is a contract.
pub(crate) fn not_acquired_body(status: u16, key: &str) -> String {
    format!(
        concat!(
            r#"{{"type":"https://docs.rs/distlock-api/latest/distlock_api/http/#lock-not-acquired","#,
            r#""title":"Lock not acquired","status":{},"#,
            r#""detail":"the lock is held by another request; try again later","key":"{}"}}"#
        ),
        status, key
    )
}
