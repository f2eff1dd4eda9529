//! The head's file-mounts server: what Ray's head does over SSH with rsync
//! (`NodeUpdater.sync_file_mounts`), rayscale's head does over HTTP for the workers it
//! boots (`rayscale_core::config::mounts`). `rayscale run` starts it on AWS, GCP and
//! Azure when the config has `file_mounts` or `cluster_synced_files`.
//!
//! `GET /file-mounts/<hex of the remote path>` with `Authorization: Bearer <token>`
//! answers a directory as a gzipped tar of what Ray's rsync would send of it (its paths
//! under `rsync_exclude`/`rsync_filter`, `rayscale_core::config::rsync_filter`, named to
//! `tar -czf - --no-recursion --null -T -`) and a file as its bytes with its mode.
//! Only the paths the cluster config names are served (the config file is read again for
//! each request, so the answer follows the config the boot scripts were rendered from);
//! anything else is a 404. The token is made once per head (`~/.rayscale/file-mounts.token`,
//! mode 0600) so that workers booted before a restart of rayscale, or restarted from a
//! stopped state, still fetch. At most [`MAX_TRANSFERS`] answers stream at once (a boot
//! retries a refused connection); a client that does not send its request headers within
//! 10 s is dropped.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use anyhow::{Context, Result};
use bytes::Bytes;
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rayscale_core::config::ClusterConfig;
use rayscale_core::config::mounts::{
    KIND_HEADER, MODE_HEADER, MountsSource, STATE_PATH, expand_home, from_hex, head_copies,
    head_location, hex_of, mount_paths,
};
use rayscale_core::config::rsync_filter::Filter;
use rayscale_core::provider::boot::head_mounts_prefix;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Answers streamed at once.
pub const MAX_TRANSFERS: usize = 8;

/// Connections served at once (a new one waits).
const MAX_CONNECTIONS: usize = 128;

/// Whether `config` has mounts for workers to fetch on a provider whose workers boot from
/// rayscale's boot script.
pub fn wanted(config: &ClusterConfig) -> bool {
    ["aws", "gcp", "azure"].contains(&config.provider_type.as_str())
        && !mount_paths(&config.raw).is_empty()
}

/// The head's token: read from `path`, else made (16 random bytes as hex) and written
/// there with mode 0600.
pub fn token(path: &Path) -> Result<String> {
    if let Ok(t) = std::fs::read_to_string(path) {
        let t = t.trim().to_string();
        if t.len() >= 32 && t.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(t);
        }
        anyhow::bail!(
            "{}: not a file-mounts token (32 hex digits); remove it to have a new one made",
            path.display()
        );
    }
    let mut raw = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut raw))
        .context("reading /dev/urandom for the file-mounts token")?;
    let t: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options
        .open(path)
        .with_context(|| format!("writing the file-mounts token to {}", path.display()))?;
    f.write_all(t.as_bytes())
        .with_context(|| format!("writing the file-mounts token to {}", path.display()))?;
    Ok(t)
}

/// An answer's body: whatever a reader gives, in chunks (a file, tar's output, a message).
struct ReaderBody {
    reader: Box<dyn AsyncRead + Unpin + Send + Sync>,
    /// Held while the answer streams.
    _permit: Option<OwnedSemaphorePermit>,
    /// tar, killed if the client goes away.
    _child: Option<tokio::process::Child>,
}

impl hyper::body::Body for ReaderBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut rb = ReadBuf::new(&mut buf);
        match Pin::new(&mut self.reader).poll_read(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) if rb.filled().is_empty() => Poll::Ready(None),
            Poll::Ready(Ok(())) => {
                Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(rb.filled())))))
            }
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<ReaderBody> {
    let mut r = Response::new(ReaderBody {
        reader: Box::new(std::io::Cursor::new(body.into_bytes())),
        _permit: None,
        _child: None,
    });
    *r.status_mut() = status;
    r
}

/// What the server needs for each request.
struct Served {
    config_path: PathBuf,
    home: PathBuf,
    token: String,
    transfers: Arc<Semaphore>,
    /// The last state answered, and when it was computed (held across a walk).
    state: tokio::sync::Mutex<Option<(std::time::Instant, String)>>,
}

async fn answer(req: Request<Incoming>, s: Arc<Served>) -> Response<ReaderBody> {
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
    }
    let authorized = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| constant_time_eq(t.trim().as_bytes(), s.token.as_bytes()));
    if !authorized {
        return text(
            StatusCode::UNAUTHORIZED,
            "a bearer token is needed\n".into(),
        );
    }
    if req.uri().path() == STATE_PATH {
        return state(&s).await;
    }
    let Some(remote) = req
        .uri()
        .path()
        .strip_prefix("/file-mounts/")
        .and_then(from_hex)
    else {
        return text(
            StatusCode::NOT_FOUND,
            "not found: /file-mounts/<hex of the path>\n".into(),
        );
    };
    // The config as it is now: only its mounts are served.
    let config = match config_now(s.as_ref()) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    if !mount_paths(&config.raw).contains(&remote) {
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "{remote}: not a file mount of cluster {}\n",
                config.cluster_name
            ),
        );
    }
    let local = match local_of(&config, &remote, &s.home) {
        Ok(l) => l,
        Err(m) => return text(StatusCode::SERVICE_UNAVAILABLE, m),
    };
    let Ok(permit) = s.transfers.clone().acquire_owned().await else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into());
    };
    let meta = match tokio::fs::metadata(&local).await {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(
                "file mounts: a worker asked for {remote}: {}: {e}",
                local.display()
            );
            return text(
                StatusCode::NOT_FOUND,
                format!(
                    "the head has no {remote} ({}: {e}): rayscale up (or ray up) copies file_mounts to the head, and cluster_synced_files are what the head makes\n",
                    local.display()
                ),
            );
        }
    };
    let mut r = if meta.is_dir() {
        // Exactly what Ray's rsync would send, named to tar one by one.
        let filter = Filter::from_config(&config.raw);
        let root = local.clone();
        let Ok(paths) = tokio::task::spawn_blocking(move || filter.kept_in(&root)).await else {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the head could not list {}\n", local.display()),
            );
        };
        let mut names = b".\0".to_vec();
        for p in paths {
            names.extend_from_slice(b"./");
            names.extend_from_slice(&p);
            names.push(0);
        }
        let mut cmd = tokio::process::Command::new("tar");
        cmd.arg("-czf")
            .arg("-")
            .arg("-C")
            .arg(&local)
            .args(["--no-recursion", "--null", "-T", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the head cannot run tar: {e}\n"),
                );
            }
        };
        if let Some(mut stdin) = child.stdin.take() {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt as _;
                // A tar that stops reading (the worker went) ends this write.
                let _ = stdin.write_all(&names).await;
            });
        }
        let Some(out) = child.stdout.take() else {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "tar has no output\n".into(),
            );
        };
        let mut r = Response::new(ReaderBody {
            reader: Box::new(out),
            _permit: Some(permit),
            _child: Some(child),
        });
        r.headers_mut()
            .insert(KIND_HEADER, hyper::header::HeaderValue::from_static("dir"));
        r
    } else {
        let f = match tokio::fs::File::open(&local).await {
            Ok(f) => f,
            Err(e) => {
                return text(
                    StatusCode::FORBIDDEN,
                    format!("the head cannot read {}: {e}\n", local.display()),
                );
            }
        };
        let mode = {
            use std::os::unix::fs::PermissionsExt;
            meta.permissions().mode() & 0o7777
        };
        let mut r = Response::new(ReaderBody {
            reader: Box::new(f),
            _permit: Some(permit),
            _child: None,
        });
        r.headers_mut()
            .insert(KIND_HEADER, hyper::header::HeaderValue::from_static("file"));
        if let Ok(v) = hyper::header::HeaderValue::from_str(&format!("{mode:o}")) {
            r.headers_mut().insert(MODE_HEADER, v);
        }
        r
    };
    tracing::info!("file mounts: serving {remote} ({})", local.display());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/octet-stream"),
    );
    r
}

/// The config as it is now (each answer follows it), or the answer saying why not.
fn config_now(s: &Served) -> std::result::Result<ClusterConfig, Box<Response<ReaderBody>>> {
    crate::driver::load_config(&s.config_path).map_err(|e| {
        Box::new(text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the head cannot read its config: {e:#}\n"),
        ))
    })
}

/// Where the head keeps mount `remote`: a head whose Ray runs in a container keeps what
/// `up` copied where its container mounts them from (`cluster_synced_files` are the
/// head's own, at their paths).
fn local_of(
    config: &ClusterConfig,
    remote: &str,
    home: &Path,
) -> std::result::Result<PathBuf, String> {
    let copied = head_copies(&config.raw).is_ok_and(|c| c.iter().any(|(r, _)| r == remote));
    let prefix = match head_mounts_prefix(config) {
        Ok(p) => p.filter(|_| copied),
        Err(e) => return Err(format!("the head cannot read its docker settings: {e}\n")),
    };
    Ok(expand_home(&head_location(remote, prefix.as_deref()), home))
}

/// How long one state is answered before the trees are walked again (every worker asks
/// every few seconds).
const STATE_TTL: std::time::Duration = std::time::Duration::from_secs(2);

/// `GET /file-mounts-state`: one line per mount, `<hex of its path> <digest of its tree
/// on the head>` (see [`tree_digest`]); a line changes when its mount does. One walk at a
/// time: a request that comes during a walk waits for it and takes its answer.
async fn state(s: &Served) -> Response<ReaderBody> {
    let mut cached = s.state.lock().await;
    if let Some((at, lines)) = cached.as_ref()
        && at.elapsed() < STATE_TTL
    {
        return text(StatusCode::OK, lines.clone());
    }
    let config = match config_now(s) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let mut roots = Vec::new();
    for remote in mount_paths(&config.raw) {
        match local_of(&config, &remote, &s.home) {
            Ok(l) => roots.push((remote, l)),
            Err(m) => return text(StatusCode::SERVICE_UNAVAILABLE, m),
        }
    }
    let filter = Filter::from_config(&config.raw);
    let walked = tokio::task::spawn_blocking(move || {
        roots
            .iter()
            .map(|(remote, local)| {
                format!(
                    "{} {}\n",
                    hex_of(remote),
                    tree_digest(local, remote, &filter)
                )
            })
            .collect::<String>()
    })
    .await;
    let lines = match walked {
        Ok(l) => l,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the head could not read its copies: {e}\n"),
            );
        }
    };
    *cached = Some((std::time::Instant::now(), lines.clone()));
    text(StatusCode::OK, lines)
}

/// A digest of the tree at `local` (mount `remote`) as a worker gets it: the path,
/// size, modification time and mode of each entry `filter` keeps (what the head sends,
/// [`Filter::kept_in`]; a directory by its path and mode alone, since its time moves
/// when an excluded file comes or goes), symlinks not followed; a path that cannot be
/// read counts as such. A change to a file the filter leaves out (logs written into an
/// excluded directory, a `.git` in `rsync_exclude`) changes nothing, so the workers do
/// not fetch the mount again for it.
fn tree_digest(local: &Path, remote: &str, filter: &Filter) -> String {
    use std::hash::Hasher as _;
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::fs::MetadataExt as _;
    // `DefaultHasher::new()` has fixed keys: the same trees give the same digest in any
    // process of this binary (a new binary may change it: the workers fetch once more).
    let mut h = std::hash::DefaultHasher::new();
    fn entry(h: &mut impl std::hash::Hasher, path: &Path, rel: &[u8]) {
        h.write(rel);
        h.write_u8(0);
        match std::fs::symlink_metadata(path) {
            Err(_) => h.write(b"unreadable\0"),
            Ok(m) if m.is_dir() => h.write_u32(m.mode()),
            Ok(m) => {
                h.write_u64(m.len());
                h.write_i64(m.mtime());
                h.write_i64(m.mtime_nsec());
                h.write_u32(m.mode());
            }
        }
    }
    entry(&mut h, local, remote.as_bytes());
    if std::fs::symlink_metadata(local).is_ok_and(|m| m.is_dir()) {
        for rel in filter.kept_in(local) {
            entry(&mut h, &local.join(std::ffi::OsStr::from_bytes(&rel)), &rel);
        }
    }
    format!("{:016x}", h.finish())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Binds `0.0.0.0:port` now (a port in use fails here, in one line), serves `config_path`'s
/// mounts from under `home` on a task, and returns where workers fetch them.
pub async fn serve(config_path: &Path, home: &Path, port: u16) -> Result<MountsSource> {
    let token = token(&home.join(".rayscale/file-mounts.token"))?;
    let addr = SocketAddr::from(([0, 0, 0, 0], port));
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!(
            "the file-mounts server cannot listen on {addr} (workers fetch file_mounts there): \
             give another port with --file-mounts-port"
        )
    })?;
    let bound = listener
        .local_addr()
        .context("the file-mounts listener has no address")?;
    let served = Arc::new(Served {
        config_path: config_path.to_path_buf(),
        home: home.to_path_buf(),
        token: token.clone(),
        transfers: Arc::new(Semaphore::new(MAX_TRANSFERS)),
        state: tokio::sync::Mutex::new(None),
    });
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let Ok(slot) = connections.clone().acquire_owned().await else {
                return;
            };
            let (stream, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("file-mounts server: cannot accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let served = served.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let service = hyper::service::service_fn(move |req| {
                    let served = served.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(req, served).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(std::time::Duration::from_secs(10))
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(e) = conn.await {
                    tracing::debug!("file-mounts server: connection ended: {e}");
                }
            });
        }
    });
    tracing::info!("file mounts: served to the workers on {bound}");
    Ok(MountsSource {
        port: bound.port(),
        token,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rayscale_core::config::mounts::hex_of;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.0 request (the answer is not chunked and ends with the connection):
    /// the head of the answer and its body.
    async fn get(port: u16, path: &str, token: Option<&str>) -> (String, Vec<u8>) {
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        c.write_all(format!("GET {path} HTTP/1.0\r\n{auth}\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).await.unwrap();
        let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        (
            String::from_utf8_lossy(&out[..at]).to_lowercase(),
            out[at + 4..].to_vec(),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_the_configs_mounts_are_served_and_only_with_the_token() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rayscale-mounts-srv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let home = dir.join("home");
        for d in ["code/sub", "code/.git"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        for (f, text) in [
            ("code/a.py", "a"),
            ("code/b.pyc", "b"),
            ("code/.git/HEAD", "h"),
            ("code/sub/c.txt", "c"),
            ("code/.gitignore", "/build\n*.log\n"),
            ("code/sub/d.log", "d"),
            ("code/sub/build", "a file of that name, under sub: kept"),
            ("code/-v", "a name tar would read as an option"),
            ("cred.json", "{}"),
            ("secret.txt", "not a mount"),
        ] {
            std::fs::write(home.join(f), text).unwrap();
        }
        std::fs::set_permissions(
            home.join("cred.json"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let config = dir.join("cluster.yaml");
        std::fs::write(
            &config,
            "cluster_name: m\nprovider: {type: aws, region: us-east-1}\nhead_node_type: h\n\
             available_node_types:\n  h: {resources: {}, node_config: {InstanceType: m5.large}}\n\
             file_mounts: {'~/code': ./code, '~/cred.json': ./cred.json, '~/gone': ./gone}\n\
             rsync_exclude: ['**/.git', '**/.git/**', '*.pyc']\nrsync_filter: [.gitignore]\n",
        )
        .unwrap();
        std::fs::create_dir_all(home.join("code/build")).unwrap();
        std::fs::write(home.join("code/build/o"), "o").unwrap();
        let src = serve(&config, &home, 0).await.unwrap();
        let t = Some(src.token.as_str());
        let url = |p: &str| format!("/file-mounts/{}", hex_of(p));

        let (head, _) = get(src.port, &url("~/code"), None).await;
        assert!(head.starts_with("http/1.0 401"), "{head}");
        let (head, _) = get(src.port, &url("~/code"), Some("0123")).await;
        assert!(head.starts_with("http/1.0 401"), "{head}");
        // A file of the head's that is not a mount is never served.
        let (head, body) = get(src.port, &url("~/secret.txt"), t).await;
        assert!(head.starts_with("http/1.0 404"), "{head}");
        assert!(String::from_utf8_lossy(&body).contains("not a file mount"));
        let (head, _) = get(src.port, "/file-mounts/../../etc/passwd", t).await;
        assert!(head.starts_with("http/1.0 404"), "{head}");
        // A mount the head lacks: 404 with the reason the worker's boot prints.
        let (head, body) = get(src.port, &url("~/gone"), t).await;
        assert!(head.starts_with("http/1.0 404"), "{head}");
        assert!(String::from_utf8_lossy(&body).contains("the head has no ~/gone"));
        // A file: its bytes and mode.
        let (head, body) = get(src.port, &url("~/cred.json"), t).await;
        assert!(head.starts_with("http/1.0 200"), "{head}");
        assert!(head.contains("x-rayscale-mount-kind: file"), "{head}");
        assert!(head.contains("x-rayscale-mount-mode: 600"), "{head}");
        assert_eq!(body, b"{}");
        // A directory: a tar of its contents without what rsync_exclude leaves out.
        let (head, body) = get(src.port, &url("~/code"), t).await;
        assert!(head.contains("x-rayscale-mount-kind: dir"), "{head}");
        let tgz = dir.join("code.tgz");
        std::fs::write(&tgz, &body).unwrap();
        let listed = std::process::Command::new("tar")
            .arg("-tzf")
            .arg(&tgz)
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&listed.stdout).to_string();
        assert!(
            listed.contains("./a.py") && listed.contains("./sub/c.txt"),
            "{listed}"
        );
        assert!(
            !listed.contains(".git/") && !listed.contains("b.pyc"),
            "{listed}"
        );
        // The .gitignore's lines as Ray's rsync reads them: in every directory below,
        // `/build` only at the top.
        assert!(
            listed.contains("./.gitignore")
                && listed.contains("./sub/build")
                && listed.contains("./-v"),
            "{listed}"
        );
        assert!(
            !listed.contains("d.log") && !listed.contains("./build/"),
            "{listed}"
        );
        // The token is kept for the next start.
        assert_eq!(
            token(&home.join(".rayscale/file-mounts.token")).unwrap(),
            src.token
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A worker's boot commands with `file_mounts_sync_continuously` (the boot script's
    /// own, run by bash against this server): the first fetch, then a change on the head
    /// reaches the worker without anything else run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_sync_continuously_a_worker_fetches_what_changed_on_the_head() {
        use std::os::unix::process::CommandExt as _;
        let dir = std::env::temp_dir().join(format!("rayscale-mounts-sync-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (home, worker) = (dir.join("head"), dir.join("worker"));
        std::fs::create_dir_all(home.join("code")).unwrap();
        std::fs::create_dir_all(&worker).unwrap();
        std::fs::write(home.join("code/a.py"), "a1").unwrap();
        std::fs::write(home.join("data.txt"), "d").unwrap();
        let config = dir.join("cluster.yaml");
        std::fs::write(
            &config,
            "cluster_name: m\nprovider: {type: aws, region: us-east-1}\nhead_node_type: h\n\
             available_node_types:\n  h: {resources: {}, node_config: {InstanceType: m5.large}}\n\
             file_mounts: {'~/code': ./code, '~/data.txt': ./data.txt}\n\
             file_mounts_sync_continuously: true\n",
        )
        .unwrap();
        let src = serve(&config, &home, 0).await.unwrap();
        // The state: only with the token, the same while nothing changes.
        let (head, _) = get(src.port, STATE_PATH, None).await;
        assert!(head.starts_with("http/1.0 401"), "{head}");
        let (_, first) = get(src.port, STATE_PATH, Some(&src.token)).await;
        let (_, again) = get(src.port, STATE_PATH, Some(&src.token)).await;
        assert_eq!(first, again);
        let line = String::from_utf8_lossy(&first).to_string();
        let hexes: Vec<&str> = line
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(hexes, [hex_of("~/code"), hex_of("~/data.txt")], "{line}");
        let cfg = crate::driver::load_config(&config).unwrap();
        let cmds = rayscale_core::provider::boot::worker_mount_commands(&cfg.raw, &src, None);
        let script = format!("set -e\nRAY_HEAD_IP=127.0.0.1\n{}\n", cmds.join("\n"));
        // Its own process group, which the loop left running stays in.
        let child = std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .env("HOME", &worker)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        /// Kills the process group (the loop too) however the test ends.
        struct Group(u32);
        impl Drop for Group {
            fn drop(&mut self) {
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", "--", &format!("-{}", self.0)])
                    .status();
            }
        }
        let _group = Group(child.id());
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let read = || std::fs::read_to_string(worker.join("code/a.py")).unwrap_or_default();
        assert_eq!(read(), "a1");
        std::fs::write(home.join("code/a.py"), "a2").unwrap();
        let log = || {
            std::fs::read_to_string(worker.join(".rayscale/file-mounts-sync.log"))
                .unwrap_or_default()
        };
        // Until the pass that fetched it has said so.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !(read() == "a2" && log().contains("file mount ~/code fetched"))
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let log = log();
        assert_eq!(read(), "a2", "the change did not reach the worker: {log}");
        assert!(log.contains("a file mount changed on the head"), "{log}");
        // Only the mount that changed is fetched again.
        assert!(
            log.contains("file mount ~/code fetched")
                && !log.contains("file mount ~/data.txt fetched"),
            "{log}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The state of a mount moves with what a worker gets, not with what the filter
    /// leaves out (a log written into an excluded directory fetches nothing again).
    #[test]
    fn a_mounts_digest_follows_its_kept_files_only() {
        let dir = std::env::temp_dir().join(format!("rayscale-digest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        std::fs::write(dir.join("a.py"), "a1").unwrap();
        let filter = Filter::from_config(&serde_json::json!({"rsync_exclude": ["logs/", "*.tmp"]}));
        let digest = || tree_digest(&dir, "~/code", &filter);
        let first = digest();
        std::fs::write(dir.join("logs/run.log"), "line\n").unwrap();
        std::fs::write(dir.join("scratch.tmp"), "x").unwrap();
        assert_eq!(digest(), first, "excluded files changed nothing");
        std::fs::write(dir.join("a.py"), "a22").unwrap();
        let second = digest();
        assert_ne!(second, first, "a kept file changed");
        std::fs::write(dir.join("b.py"), "b").unwrap();
        assert_ne!(digest(), second, "a kept file came");
        // Without the filter, the excluded files count.
        assert_ne!(tree_digest(&dir, "~/code", &Filter::default()), digest());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_token_is_made_once_owner_only_and_kept() {
        let dir = std::env::temp_dir().join(format!("rayscale-token-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let p = dir.join(".rayscale/file-mounts.token");
        let t = token(&p).unwrap();
        assert_eq!(t.len(), 32);
        assert_eq!(token(&p).unwrap(), t, "kept across restarts");
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        std::fs::write(&p, "short").unwrap();
        assert!(token(&p).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
