//! A small W3C WebDriver client over reqwest (the API tests' HTTP client) for the console's
//! browser tests: starts `chromedriver` on a free port, opens headless Chromium with a fresh
//! profile, and offers what the tests need (navigate, find, click, type, run a script, wait,
//! screenshot). No other WebDriver crate is needed (and none has to be fetched).
#![allow(dead_code)]

use base64::Engine;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where screenshots go: `target/console-screenshots/` (CARGO_TARGET_DIR if set).
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn find_binary(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Chromium and chromedriver, or a panic that says how to install them.
pub fn browser_binaries() -> (PathBuf, PathBuf) {
    let chromium = std::env::var_os("AGENTD_TEST_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| find_binary(&["chromium", "chromium-browser", "google-chrome"]));
    let driver = std::env::var_os("AGENTD_TEST_CHROMEDRIVER")
        .map(PathBuf::from)
        .or_else(|| find_binary(&["chromedriver"]));
    match (chromium, driver) {
        (Some(c), Some(d)) => (c, d),
        (c, d) => panic!(
            "the console's browser tests need headless Chromium and chromedriver \
             (found chromium: {}, chromedriver: {}). Install them with \
             `apt-get install -y chromium chromium-driver` (scripts/test does this when they are \
             missing), or point AGENTD_TEST_CHROMIUM / AGENTD_TEST_CHROMEDRIVER at them.",
            c.map_or("no".into(), |p| p.display().to_string()),
            d.map_or("no".into(), |p| p.display().to_string()),
        ),
    }
}

/// A chromedriver process and one browser session; both end on drop.
pub struct Browser {
    http: reqwest::Client,
    driver: Child,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let url = format!("{}/session/{}", self.base, self.session);
        // Best effort: end the session (closes Chromium), then the driver.
        let _ = std::thread::spawn(move || blocking_delete(&url)).join();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A DELETE without an async runtime (Drop cannot await).
fn blocking_delete(url: &str) {
    if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        rt.block_on(async {
            let _ = reqwest::Client::new().delete(url).send().await;
        });
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A found element.
#[derive(Clone, Debug)]
pub struct El(String);

impl Browser {
    /// Starts chromedriver and a headless Chromium session (fresh profile).
    pub async fn start() -> Browser {
        let (chromium, driver_bin) = browser_binaries();
        let port = free_port();
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", driver_bin.display()));
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let started = Instant::now();
        loop {
            if let Ok(r) = http.get(format!("{base}/status")).send().await
                && let Ok(v) = r.json::<Value>().await
                && v["value"]["ready"] == true
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "chromedriver did not answer on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let user_data = format!("--user-data-dir={}", profile.path().display());
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
            user_data.as_str(),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let r: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {r}"))
            .to_string();
        Browser {
            http,
            driver,
            base,
            session,
            _profile: profile,
        }
    }

    async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or(json!({}))),
        };
        let v: Value = req.send().await.unwrap().json().await.unwrap();
        v["value"].clone()
    }

    async fn try_cmd(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, Value> {
        let v = self.cmd(method, path, body).await;
        if v.get("error").is_some() {
            Err(v)
        } else {
            Ok(v)
        }
    }

    pub async fn goto(&self, url: &str) {
        self.try_cmd("POST", "/url", Some(json!({"url": url})))
            .await
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    /// Runs `script` (a function body; `arguments` are `args`) and returns its value.
    pub async fn exec(&self, script: &str, args: Vec<Value>) -> Value {
        self.try_cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
        .unwrap_or_else(|e| panic!("script {script}: {e}"))
    }

    async fn find_now(&self, css: &str) -> Option<El> {
        let v = self
            .try_cmd(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await
            .map_err(|e| eprintln!("find {css}: {e}"))
            .ok()?;
        v[ELEMENT].as_str().map(|s| El(s.to_string()))
    }

    /// Waits (up to 20 s) for an element matching `css`.
    pub async fn find(&self, css: &str) -> El {
        let started = Instant::now();
        loop {
            if let Some(e) = self.find_now(css).await {
                return e;
            }
            if started.elapsed() > Duration::from_secs(20) {
                let body = self.text_of_page().await;
                panic!("no element {css:?} within 20 s; the page says:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (up to 20 s) until the page's visible text contains `needle`; returns that text,
    /// after checking it holds no stray text ([`stray_text`]).
    pub async fn wait_text(&self, needle: &str) -> String {
        let started = Instant::now();
        loop {
            let t = self.text_of_page().await;
            if t.contains(needle) {
                let stray = stray_text(&t);
                assert!(
                    stray.is_empty(),
                    "the page shows stray text {stray:?} (a value printed as JS would print \
                     it, not as a person reads it); the page says:\n{t}"
                );
                return t;
            }
            if started.elapsed() > Duration::from_secs(20) {
                panic!("the page never showed {needle:?}; it says:\n{t}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs axe-core (`AGENTD_TEST_AXE`, or `axe-core/axe.min.js` in the tools directory of
    /// `scripts/test`) on the page as it is; returns its violations as `rule: targets` lines.
    pub async fn axe(&self) -> Vec<String> {
        let source = std::fs::read_to_string(axe_path()).unwrap();
        let done = self
            .cmd(
                "POST",
                "/execute/async",
                Some(json!({"script": format!(
                    "const done = arguments[arguments.length - 1];\n{source}\n\
                     axe.run(document, {{resultTypes: ['violations']}})\
                        .then((r) => done(r.violations.map((v) => v.id + ': ' + \
                            v.nodes.map((n) => n.target.join(' ')).join(', '))))\
                        .catch((e) => done(['axe failed: ' + e]));"), "args": []})),
            )
            .await;
        done.as_array()
            .expect("axe answers a list")
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .collect()
    }

    pub async fn text_of_page(&self) -> String {
        self.cmd("POST", "/execute/sync", Some(json!({"script": "return document.body ? document.body.innerText : ''", "args": []})))
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    pub async fn text(&self, el: &El) -> String {
        self.cmd("GET", &format!("/element/{}/text", el.0), None)
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    pub async fn click(&self, el: &El) {
        self.try_cmd("POST", &format!("/element/{}/click", el.0), None)
            .await
            .unwrap_or_else(|e| panic!("click: {e}"));
    }

    /// Empties an input or textarea.
    pub async fn clear(&self, el: &El) {
        self.try_cmd("POST", &format!("/element/{}/clear", el.0), None)
            .await
            .unwrap_or_else(|e| panic!("clear: {e}"));
    }

    pub async fn type_into(&self, el: &El, text: &str) {
        self.try_cmd(
            "POST",
            &format!("/element/{}/value", el.0),
            Some(json!({"text": text})),
        )
        .await
        .unwrap_or_else(|e| panic!("type: {e}"));
    }

    /// Saves a PNG of the viewport as `<screenshot_dir>/<name>.png`.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let b64 = self.cmd("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().expect("a screenshot"))
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let path = screenshot_dir().join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }
}

/// Lines of a page's visible text that show a value as JavaScript prints it rather than as a
/// person reads it: `[object …]`, `undefined`, `NaN`, or a line that is only `null`.
pub fn stray_text(text: &str) -> Vec<String> {
    let word = |line: &str, w: &str| {
        line.split(|c: char| !c.is_alphanumeric() && c != '_')
            .any(|t| t == w)
    };
    text.lines()
        .filter(|line| {
            line.contains("[object ")
                || word(line, "undefined")
                || word(line, "NaN")
                || line.trim() == "null"
        })
        .map(str::to_string)
        .collect()
}

/// axe-core's script: `AGENTD_TEST_AXE`, else `axe-core/axe.min.js` under `AGENTD_TOOLS_DIR`
/// (default `~/.cache/agentd/tools`), or a panic that says how to get it.
pub fn axe_path() -> PathBuf {
    let path = std::env::var_os("AGENTD_TEST_AXE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let tools = std::env::var_os("AGENTD_TOOLS_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    Path::new(&std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache/agentd/tools")
                });
            tools.join("axe-core/axe.min.js")
        });
    assert!(
        path.is_file(),
        "the console's accessibility check needs axe-core at {} (scripts/test fetches it: \
         `npm pack axe-core@4.10.2` and copy package/axe.min.js there, or point AGENTD_TEST_AXE \
         at it)",
        path.display()
    );
    path
}

#[cfg(test)]
mod tests {
    #[test]
    fn stray_text_finds_what_js_prints() {
        let page = "Run 1\n[object HTMLHeadingElement],[object HTMLPreElement]\nnull\n\
                    tokens undefined / NaN\n\"x\": null\nnullable is fine";
        assert_eq!(super::stray_text(page).len(), 3);
    }
}
