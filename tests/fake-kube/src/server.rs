//! Listening: TCP accept, TLS (rustls, ring), HTTP/1.1 and HTTP/2 via hyper, and cutting
//! connections when the cluster is made unreachable or shut down.

use std::sync::Arc;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::api::ConnInfo;
use crate::knobs::Knobs;

pub(crate) async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    knobs: Knobs,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let Ok((tcp, _peer)) = accepted else {
            continue;
        };
        if knobs.is_unreachable() {
            drop(tcp);
            continue;
        }
        let _ = tcp.set_nodelay(true);
        let tls = tls.clone();
        let router = router.clone();
        let mut unreachable = knobs.unreachable_rx();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let serve = async move {
                match tls {
                    Some(acceptor) => {
                        let Ok(stream) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let client_cert = stream.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
                        serve_io(stream, router, ConnInfo { client_cert }).await;
                    }
                    None => serve_io(tcp, router, ConnInfo::default()).await,
                }
            };
            tokio::select! {
                _ = serve => {}
                _ = unreachable.wait_for(|u| *u) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        });
    }
}

async fn serve_io<S>(io: S, router: Router, info: ConnInfo)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let info = Arc::new(info);
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert((*info).clone());
        router.clone().oneshot(req.map(axum::body::Body::new))
    });
    let _ = auto::Builder::new(TokioExecutor::new()).serve_connection_with_upgrades(TokioIo::new(io), service).await;
}
