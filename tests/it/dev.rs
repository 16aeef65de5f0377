//! `agentd dev` as a person runs it: the process prints the console URL, a key and a `curl`
//! upload line; the printed line, run by a shell, uploads a document that reaches `proposed`
//! (offline provider); the console answers; SIGINT ends the process with 0. A second start on
//! the same database makes a new key and does not upload the samples again.

use crate::common::{self, TestDb};
use serde_json::Value;
use std::io::{BufRead, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `agentd dev`, what it printed on stdout until ready, and its stderr (drained).
struct Dev {
    child: Child,
    printed: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn start(db: &TestDb) -> Dev {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentd"));
    cmd.args(["dev", "--addr", "127.0.0.1:0"])
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "AGENTD_LLM__PROVIDER",
        "AGENTD_LLM__MODEL",
        "AGENTD_CONFIG",
    ] {
        cmd.env_remove(k);
    }
    let mut child = cmd.spawn().expect("spawn agentd dev");
    let mut err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut printed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = line.starts_with("Ctrl-C stops");
                printed.push(line);
                if done {
                    break;
                }
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "agentd dev did not print its ready block; stdout:\n{}\nstderr:\n{}",
                    printed.join("\n"),
                    stderr.join().unwrap()
                );
            }
        }
    }
    Dev {
        child,
        printed,
        stderr,
    }
}

impl Dev {
    /// The rest of the printed line that starts (after indentation) with `label`.
    fn field(&self, label: &str) -> String {
        self.printed
            .iter()
            .find_map(|l| l.trim_start().strip_prefix(label))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {label:?} line in:\n{}", self.printed.join("\n")))
    }

    /// Sends SIGINT; the process must exit 0 within 30 s. Returns its stderr.
    fn interrupt(mut self) -> String {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("agentd dev still running 30 s after SIGINT");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stderr = self.stderr.join().unwrap();
        assert!(status.success(), "agentd dev exited {status}:\n{stderr}");
        stderr
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_prints_what_works_and_stops_on_sigint() {
    let db = TestDb::new().await;
    let dev = start(&db);
    let console = dev.field("console");
    let key = dev.field("key");
    assert!(key.starts_with("agentd_"), "key line: {key}");
    let base = console.trim_end_matches('/').to_string();
    let samples = dev.field("samples");
    assert!(samples.starts_with("4 uploaded"), "samples line: {samples}");
    let curl = dev
        .printed
        .iter()
        .map(|l| l.trim())
        .find(|l| l.starts_with("curl "))
        .expect("a curl line")
        .to_string();
    assert!(curl.contains(&format!("{base}/v1/documents")) && curl.contains(&key));

    // The printed line as a person pastes it (curl is what the line needs; without curl, the same
    // request as the line says it).
    let http = reqwest::Client::new();
    let uploaded: Value = if Command::new("sh")
        .args(["-c", "command -v curl"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let out = Command::new("sh").args(["-c", &curl]).output().unwrap();
        assert!(out.status.success(), "{curl}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    } else {
        let body = curl.split_once("-d '").unwrap().1.trim_end_matches('\'');
        http.post(format!("{base}/v1/documents"))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    };
    assert_eq!(uploaded["auto_create_status"], "queued", "{uploaded}");
    let id = uploaded["id"]
        .as_str()
        .expect("the document's id")
        .to_string();

    let url = format!("{base}/v1/documents/{id}");
    common::wait_until(60, "the uploaded document proposed", || {
        let (http, url, key) = (http.clone(), url.clone(), key.clone());
        async move {
            let Ok(r) = http.get(&url).bearer_auth(&key).send().await else {
                return false;
            };
            let v: Value = r.json().await.unwrap_or_default();
            assert_ne!(v["auto_create_status"], "failed", "{v}");
            v["auto_create_status"] == "proposed"
        }
    })
    .await;

    let page = http.get(&console).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<html"));

    let stderr = dev.interrupt();
    assert!(
        stderr.contains("OFFLINE HEURISTIC"),
        "provider not logged:\n{stderr}"
    );
    assert!(
        stderr.contains("stopped the server and the worker"),
        "{stderr}"
    );
    assert!(!stderr.contains(&key), "the key reached the logs");

    // A second start: the same org, a new key (the first stays valid), no second upload.
    let again = start(&db);
    let key2 = again.field("key");
    assert_ne!(key2, key);
    assert!(again.field("samples").starts_with("not uploaded again"));
    let base2 = again.field("console").trim_end_matches('/').to_string();
    let list: Value = http
        .get(format!("{base2}/v1/documents"))
        .bearer_auth(&key2)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let items = list["items"].as_array().unwrap_or_else(|| panic!("{list}"));
    assert_eq!(items.len(), 5, "4 samples and the upload: {list}");
    let orgs: i64 = sqlx::query_scalar("SELECT count(*) FROM orgs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(orgs, 1);
    again.interrupt();
}
