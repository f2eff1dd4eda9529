//! A TCP proxy on loopback that delays what a server answers (a loaded GCS, measured
//! from the client's side), for the live tests.

use std::io::Read;
use std::time::{Duration, Instant};

/// A TCP proxy on loopback that delivers every byte the server sends `delay` late (a
/// loaded GCS: each answer takes that much longer; the order is kept).
pub struct DelayProxy {
    /// Where clients connect (`ip:port`).
    pub addr: String,
}

impl DelayProxy {
    /// Listens on a free port of `127.0.0.1` and forwards each connection to `upstream`.
    pub fn start(upstream: &str, delay: Duration) -> DelayProxy {
        Self::start_on("127.0.0.1", upstream, delay)
    }

    /// Listens on a free port of the loopback address `ip` and forwards each connection to
    /// `upstream`. Ray's `ray start --address` replaces `127.0.0.1`, `localhost` and `::1`
    /// by the host's routable IP, where a proxy on `127.0.0.1` does not listen: a proxy
    /// that Ray's worker nodes join goes on another loopback address (`127.0.0.2`).
    pub fn start_on(ip: &str, upstream: &str, delay: Duration) -> DelayProxy {
        use std::io::Write;
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind((ip, 0)).expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let upstream = upstream.to_string();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut c_read, mut s_write) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                // Requests go through at once.
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_read, &mut s_write);
                });
                // Answers go through a delay line.
                let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
                let mut s_read = server;
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = s_read.read(&mut buf) {
                        if n == 0
                            || tx
                                .send((Instant::now() + delay, buf[..n].to_vec()))
                                .is_err()
                        {
                            break;
                        }
                    }
                });
                let mut c_write = client;
                std::thread::spawn(move || {
                    for (due, bytes) in rx {
                        std::thread::sleep(due.saturating_duration_since(Instant::now()));
                        if c_write.write_all(&bytes).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        DelayProxy { addr }
    }
}
