//! The command line's one client for the running server: HTTP/1.1 over the admin socket
//! `<data_dir>/gshare.sock` (see `http::admin_socket`), whatever `listen` says and whether or not
//! the server speaks TLS. The server knows the caller by the socket (`local:<uid>`), so no token is
//! minted and no key is read. Answers are typed; a refusal carries the server's error envelope.

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;

use crate::config::Config;
use crate::http::admin_socket::socket_path;

/// The longest a call may take (an attach applies dozens of objects through a slow cluster).
const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// A snapshot download is the whole state: no cap below what the server would send.
const MAX_ANSWER: usize = 1 << 34;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with its error envelope (`{"error":{code,message,details,request_id}}`).
    #[error("{message}")]
    Refused { status: u16, code: String, message: String, details: serde_json::Value },
    #[error("the server's admin socket {socket}: {cause}")]
    Socket { socket: PathBuf, cause: String },
    #[error("the server's answer to {path} is not what this gshare expects ({cause}); is it another version?")]
    Answer { path: String, cause: String },
}

impl ClientError {
    /// The refusal's `error.details`, when the server refused.
    pub fn details(&self) -> Option<&serde_json::Value> {
        match self {
            Self::Refused { details, .. } => Some(details),
            _ => None,
        }
    }
}

#[derive(serde::Deserialize)]
struct Envelope {
    error: EnvelopeError,
}

#[derive(serde::Deserialize)]
struct EnvelopeError {
    code: String,
    message: String,
    #[serde(default)]
    details: serde_json::Value,
}

/// The server of one data directory, reached over its admin socket.
#[derive(Debug, Clone)]
pub struct LocalServer {
    socket: PathBuf,
}

impl LocalServer {
    /// The data directory's server when it runs: something answers on its socket. `None` when no
    /// server runs (no socket, or one a killed server left): the command works offline then.
    /// A socket this user may not use is an error naming it, not a reason to go offline.
    pub async fn find(config: &Config) -> Result<Option<Self>, ClientError> {
        let socket = socket_path(&config.data_dir);
        match UnixStream::connect(&socket).await {
            Ok(_) => Ok(Some(Self { socket })),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
                Ok(None)
            }
            Err(e) => Err(Self::socket_error(&socket, &e)),
        }
    }

    /// The server at `socket` (tests).
    pub fn at(socket: PathBuf) -> Self {
        Self { socket }
    }

    fn socket_error(socket: &std::path::Path, e: &std::io::Error) -> ClientError {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            "; run this command as the user the server runs as (the socket's owner), or as root"
        } else {
            ""
        };
        ClientError::Socket { socket: socket.to_path_buf(), cause: format!("{e}{hint}") }
    }

    /// One request; the answer's status and body.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, axum::body::Bytes), ClientError> {
        let fail = |cause: String| ClientError::Socket { socket: self.socket.clone(), cause };
        let call = async {
            let stream = UnixStream::connect(&self.socket).await.map_err(|e| Self::socket_error(&self.socket, &e))?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream))
                .await
                .map_err(|e| fail(e.to_string()))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let mut req = Request::builder().method(method).uri(path).header(header::HOST, "localhost");
            if body.is_some() {
                req = req.header(header::CONTENT_TYPE, "application/json");
            }
            let req = req.body(body.map(Body::from).unwrap_or_else(Body::empty)).map_err(|e| fail(e.to_string()))?;
            let res = sender.send_request(req).await.map_err(|e| {
                fail(if e.is_incomplete_message() || e.is_closed() || e.is_canceled() {
                    format!(
                        "the server closed the connection without an answer ({e}); it serves only the user it runs \
                         as and root"
                    )
                } else {
                    e.to_string()
                })
            })?;
            let status = res.status();
            let bytes =
                axum::body::to_bytes(Body::new(res.into_body()), MAX_ANSWER).await.map_err(|e| fail(e.to_string()))?;
            Ok::<_, ClientError>((status, bytes))
        };
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| fail(format!("no answer to {path} within {} s", CALL_TIMEOUT.as_secs())))?
    }

    /// A refusal from an error answer.
    fn refused(status: StatusCode, bytes: &[u8]) -> ClientError {
        match serde_json::from_slice::<Envelope>(bytes) {
            Ok(Envelope { error }) => ClientError::Refused {
                status: status.as_u16(),
                code: error.code,
                message: error.message,
                details: error.details,
            },
            Err(_) => ClientError::Refused {
                status: status.as_u16(),
                code: String::new(),
                message: format!("{status}: {}", String::from_utf8_lossy(bytes).trim()),
                details: serde_json::Value::Null,
            },
        }
    }

    /// The raw body of a successful answer.
    pub async fn call_bytes(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<Vec<u8>, ClientError> {
        let body = match body {
            Some(b) => Some(
                serde_json::to_vec(b).map_err(|e| ClientError::Answer { path: path.into(), cause: e.to_string() })?,
            ),
            None => None,
        };
        let (status, bytes) = self.send(method, path, body).await?;
        if !status.is_success() {
            return Err(Self::refused(status, &bytes));
        }
        Ok(bytes.to_vec())
    }

    /// A call whose answer is JSON of type `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        let bytes = self.call_bytes(method, path, body).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Answer { path: path.into(), cause: e.to_string() })
    }

    /// A call answered with no body (204).
    pub async fn call_empty(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<(), ClientError> {
        self.call_bytes(method, path, body).await.map(drop)
    }
}

/// No request body (`None::<&NoBody>`).
pub type NoBody = ();
