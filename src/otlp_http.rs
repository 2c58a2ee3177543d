//! `OtlpHttp`: the POST of an OTLP export to a plain `http://` endpoint, made on the export
//! thread without the GIL over one kept-alive connection (`fastctl._otlp_http` puts it
//! under the OTLP exporter's own client, which keeps its retries, compression, headers
//! and timeout). HTTP/1.1, a body of known length; the answer read by its
//! `Content-Length`, chunks, or the connection's close.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyConnectionError, PyTimeoutError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Header names (in lower case, as read) and values.
type Headers = Vec<(String, String)>;

/// One HTTP answer: status, reason, headers, body.
type Answer = (u16, String, Headers, Vec<u8>);

enum Failure {
    /// The connection failed (refused, reset, closed early): the exporter's client sends
    /// again at once, once, as it does for a stale pooled connection.
    Connection(String),
    Timeout(String),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                Failure::Timeout(e.to_string())
            }
            _ => Failure::Connection(e.to_string()),
        }
    }
}

#[pyclass(frozen, module = "fastctl._core")]
pub(crate) struct OtlpHttp {
    host: String,
    port: u16,
    target: String,
    conn: Mutex<Option<BufReader<TcpStream>>>,
}

fn bad(message: &str) -> Failure {
    Failure::Connection(message.to_owned())
}

impl OtlpHttp {
    fn connect(&self, deadline: Instant) -> Result<BufReader<TcpStream>, Failure> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Failure::Timeout("no time left to connect".into()));
        }
        let mut last = None;
        for addr in (self.host.as_str(), self.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, left) {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    return Ok(BufReader::with_capacity(8192, stream));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(|| bad("the host has no address"), Failure::from))
    }

    fn exchange(
        &self,
        conn: &mut BufReader<TcpStream>,
        head: &[u8],
        body: &[u8],
        deadline: Instant,
    ) -> Result<(Answer, bool), Failure> {
        let left = |deadline: Instant| -> Result<Duration, Failure> {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                Err(Failure::Timeout("the export's timeout passed".into()))
            } else {
                Ok(left)
            }
        };
        conn.get_ref().set_write_timeout(Some(left(deadline)?))?;
        conn.get_mut().write_all(head)?;
        conn.get_mut().write_all(body)?;
        conn.get_ref().set_read_timeout(Some(left(deadline)?))?;
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            return Err(bad("the connection closed before an answer"));
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        let _version = parts.next();
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("not an HTTP answer"))?;
        let reason = parts.next().unwrap_or("").to_owned();
        let mut headers = Vec::new();
        let mut length: Option<usize> = None;
        let mut chunked = false;
        let mut close = false;
        loop {
            line.clear();
            if conn.read_line(&mut line)? == 0 {
                return Err(bad("the connection closed in the answer's headers"));
            }
            let text = line.trim_end();
            if text.is_empty() {
                break;
            }
            if let Some((name, value)) = text.split_once(':') {
                let name = name.trim().to_ascii_lowercase();
                let value = value.trim().to_owned();
                match name.as_str() {
                    "content-length" => length = value.parse().ok(),
                    "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                    "connection" => close = value.eq_ignore_ascii_case("close"),
                    _ => {}
                }
                headers.push((name, value));
            }
        }
        let mut content = Vec::new();
        if chunked {
            loop {
                line.clear();
                conn.read_line(&mut line)?;
                let size = line.trim().split(';').next().unwrap_or("");
                let size = usize::from_str_radix(size, 16).map_err(|_| bad("a bad chunk"))?;
                if size == 0 {
                    loop {
                        line.clear();
                        if conn.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                let start = content.len();
                content.resize(start + size, 0);
                conn.read_exact(&mut content[start..])?;
                line.clear();
                conn.read_line(&mut line)?;
            }
        } else if let Some(length) = length {
            content.resize(length, 0);
            conn.read_exact(&mut content)?;
        } else if status >= 200 && status != 204 && status != 304 {
            conn.read_to_end(&mut content)?;
            close = true;
        }
        Ok(((status, reason, headers, content), !close))
    }
}

#[pymethods]
impl OtlpHttp {
    /// `host`, `port` and `target` (the path and query) of an `http://` URL.
    #[new]
    fn new(host: String, port: u16, target: String) -> Self {
        Self {
            host,
            port,
            target,
            conn: Mutex::new(None),
        }
    }

    /// POSTs `body` with `headers` (none of them ``Host`` or ``Content-Length``, which
    /// are written here) within `timeout` seconds; returns ``(status, reason, headers,
    /// content)``. Raises `ConnectionError` when the connection failed and `TimeoutError`
    /// when the time ran out. The GIL is released meanwhile.
    fn post<'py>(
        &self,
        py: Python<'py>,
        headers: Headers,
        body: &Bound<'py, PyBytes>,
        timeout: f64,
    ) -> PyResult<(u16, String, Headers, Bound<'py, PyBytes>)> {
        let mut head = format!("POST {} HTTP/1.1\r\nHost: {}", self.target, self.host);
        if self.port != 80 {
            head.push_str(&format!(":{}", self.port));
        }
        head.push_str("\r\n");
        for (name, value) in &headers {
            if name.contains(['\r', '\n']) || value.contains(['\r', '\n']) {
                continue; // a header that would split the request: left out
            }
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let data = body.as_bytes();
        head.push_str(&format!("Content-Length: {}\r\n\r\n", data.len()));
        let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::MAX);
        let deadline = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400));
        let result = py.detach(|| {
            let mut held = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            let mut conn = match held.take() {
                Some(conn) => conn,
                None => self.connect(deadline)?,
            };
            let (answer, keep) = self.exchange(&mut conn, head.as_bytes(), data, deadline)?;
            if keep {
                *held = Some(conn);
            }
            Ok::<Answer, Failure>(answer)
        });
        match result {
            Ok((status, reason, headers, content)) => {
                Ok((status, reason, headers, PyBytes::new(py, &content)))
            }
            Err(Failure::Connection(m)) => Err(PyConnectionError::new_err(m)),
            Err(Failure::Timeout(m)) => Err(PyTimeoutError::new_err(m)),
        }
    }

    /// Closes the kept connection (the next `post` opens another).
    fn close(&self) {
        self.conn.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<OtlpHttp>()?;
    Ok(())
}
