//! A gRPC server of the tests on its own thread and tokio runtime, serving a bound
//! listener until it is stopped or dropped: shared by the test servers (the gRPC expander,
//! the fake GCS), so synchronous callers can use them and a benchmark that times its own
//! thread does not count them.

use std::future::Future;

use tonic::transport::server::TcpIncoming;

/// A running server (see the module docs). Stops when dropped.
#[derive(Debug)]
pub struct Serving {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Serving {
    /// Serves `listener` (bound, any mode) with what `serve` makes of its connections
    /// (each with `TCP_NODELAY`: without it, small answers wait for the peer's delayed ACK,
    /// about 40 ms), until `serve`'s future ends or the server is stopped.
    pub fn spawn<F, Fut>(listener: std::net::TcpListener, serve: F) -> std::io::Result<Self>
    where
        F: FnOnce(TcpIncoming) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        listener.set_nonblocking(true)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
                // Not a graceful shutdown: a stopped server does not wait for its clients.
                tokio::select! {
                    _ = serve(incoming) => {}
                    _ = stop_rx => {}
                }
            });
            // Dropping the runtime here ends every open connection.
        });
        Ok(Serving {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Stops the server and waits until its port is closed.
    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.stop();
    }
}
