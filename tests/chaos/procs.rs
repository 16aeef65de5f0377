//! The suite's processes: its own PostgreSQL cluster (agentd's `PrivateCluster`, as the demo
//! starts one) and `agentd worker` / `agentd serve` children of the real binary.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// Lines of a child's stderr kept to say why it exited.
const TAIL_LINES: usize = 8;

/// A PostgreSQL cluster of the suite's own in a fresh directory on a free port; stopped and
/// removed on drop. Nothing else on the machine is touched.
pub struct Cluster {
    pub inner: Option<agentd::db::PrivateCluster>,
    root: PathBuf,
}

impl Cluster {
    pub fn start(seed: u64) -> anyhow::Result<Self> {
        let root = std::env::temp_dir().join(format!("agentd-chaos-{}-{seed}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)?;
        let mut cfg = agentd::config::Config::defaults().database;
        cfg.private_dir = root.join("pg").display().to_string();
        cfg.private_port = free_port()?;
        let inner = agentd::db::PrivateCluster::start(&cfg)?;
        Ok(Self {
            inner: Some(inner),
            root,
        })
    }

    fn pc(&self) -> &agentd::db::PrivateCluster {
        self.inner.as_ref().expect("cluster running")
    }

    /// The URL of database `db` in the cluster.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://agentd@127.0.0.1:{}/{db}", self.pc().port)
    }

    /// The server's log file.
    pub fn server_log(&self) -> PathBuf {
        self.pc().dir.join("server.log")
    }

    /// A crash of the server: immediate stop (no checkpoint), then start (WAL recovery).
    pub fn crash_restart(&self) -> anyhow::Result<()> {
        Ok(self.pc().restart(true)?)
    }

    /// A clean restart (settings that need one).
    pub fn restart(&self) -> anyhow::Result<()> {
        Ok(self.pc().restart(false)?)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        drop(self.inner.take());
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// An `agentd` child process. Killed (SIGKILL) on drop.
pub struct Proc {
    child: Child,
    pub pid: u32,
    /// The last lines of its stderr (its errors: the suite runs children at `AGENTD_LOG=error`).
    tail: Arc<Mutex<VecDeque<String>>>,
}

impl Proc {
    /// `agentd <args>` with `env` on top of the environment.
    pub fn spawn(bin: &Path, args: &[&str], env: &[(String, String)]) -> anyhow::Result<Self> {
        let (p, _) = Self::spawn_inner(bin, args, env, false)?;
        Ok(p)
    }

    /// `agentd serve` on a free port; returns it with its base URL once it listens.
    pub fn serve(bin: &Path, env: &[(String, String)]) -> anyhow::Result<(Self, String)> {
        let (p, rx) = Self::spawn_inner(bin, &["serve", "--addr", "127.0.0.1:0"], env, true)?;
        let addr = rx
            .and_then(|rx| rx.recv_timeout(Duration::from_secs(120)).ok())
            .ok_or_else(|| anyhow::anyhow!("agentd serve did not print its address"))?;
        Ok((p, format!("http://{addr}")))
    }

    fn spawn_inner(
        bin: &Path,
        args: &[&str],
        env: &[(String, String)],
        watch_addr: bool,
    ) -> anyhow::Result<(Self, Option<mpsc::Receiver<String>>)> {
        // AGENTD_CHAOS_LOG_DIR=DIR keeps each child's stderr (its tracing log) in
        // DIR/<pid>.log, to see why a process exited on its own.
        let log_dir = std::env::var_os("AGENTD_CHAOS_LOG_DIR").map(PathBuf::from);
        let mut c = Command::new(bin);
        c.args(args)
            .env_remove("OPENAI_API_KEY")
            .env_remove("AGENTD_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn()?;
        let pid = child.id();
        let tail: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let kept = tail.clone();
        let rx = match child.stderr.take() {
            Some(err) => {
                let (tx, rx) = mpsc::channel();
                let mut log = match &log_dir {
                    Some(d) => {
                        std::fs::create_dir_all(d)?;
                        let mut f = std::fs::File::create(d.join(format!("{pid}.log")))?;
                        writeln!(f, "agentd {}", args.join(" "))?;
                        Some(f)
                    }
                    None => None,
                };
                std::thread::spawn(move || {
                    for line in BufReader::new(err).lines().map_while(Result::ok) {
                        if let Some(f) = log.as_mut() {
                            let _ = writeln!(f, "{line}");
                        }
                        {
                            let mut t = kept.lock().unwrap_or_else(|p| p.into_inner());
                            if t.len() == TAIL_LINES {
                                t.pop_front();
                            }
                            t.push_back(line.clone());
                        }
                        if let Some(rest) = line.split("listening on http://").nth(1) {
                            let _ = tx.send(rest.split_whitespace().next().unwrap_or("").into());
                        }
                    }
                });
                watch_addr.then_some(rx)
            }
            None => None,
        };
        Ok((Self { child, pid, tail }, rx))
    }

    /// Whether it has exited (a worker exits when its database is gone long enough).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// How it ended and the last lines it wrote (after [`Proc::exited`] said it did).
    pub fn exit_reason(&mut self) -> String {
        let status = match self.child.try_wait() {
            Ok(Some(s)) => s.to_string(),
            Ok(None) => "still running".into(),
            Err(e) => format!("unknown ({e})"),
        };
        // The reader may still be draining the pipe's last lines.
        std::thread::sleep(Duration::from_millis(100));
        let tail = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        let said: Vec<&str> = tail.iter().map(|l| l.as_str()).collect();
        format!("pid {} {status}: {}", self.pid, said.join(" | "))
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
